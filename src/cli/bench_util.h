// Helpers shared by the bench programs (src/cli/bench*_cmd.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/sample.h"

namespace glint::cli {

// `rows` random sequences of S tokens (ids < vocab), every token labelled, in
// micro-batches of mbs rows. Deterministic in seed.
std::vector<Batch> random_batches(int64_t vocab, int64_t rows, int64_t S, int64_t mbs, uint64_t seed);

// Runs a shell command and returns its output (stdout and stderr); throws glint::Error
// naming `what`, the command and its output when it fails.
std::string run_or_fail(const std::string& cmd, const std::string& what);

}  // namespace glint::cli
