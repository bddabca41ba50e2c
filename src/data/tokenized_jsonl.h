// Pre-tokenized JSONL: one {"input_ids": [...], "labels": [...]} object per line.
// "labels" may be omitted (then labels = input_ids). Blank lines are skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/sample.h"

namespace glint {

// Reads every sample. Throws glint::Error naming "path:line" and the reason for:
// invalid JSON, a missing/non-array input_ids, a non-integer id, labels whose length
// differs from input_ids, a label that is neither kIgnoreIndex nor a valid id, an id
// < 0 or >= vocab_size, an empty sample, or a file with no samples.
std::vector<Sample> read_tokenized_jsonl(const std::string& path, int64_t vocab_size);

}  // namespace glint
