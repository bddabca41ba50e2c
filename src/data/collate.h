// Turning samples into fixed-shape batches, padded or packed.
#pragma once

#include <cstdint>
#include <vector>

#include "data/sample.h"

namespace glint {

struct CollateOptions {
  int64_t seq_len = 128;  // S: tokens per row
  int64_t pad_id = 0;     // token id written into padding positions
  bool pack = false;      // false: one sample per row; true: greedily fill each row
                          // with consecutive samples (position ids restart per sample)
  bool truncate = true;   // samples longer than seq_len are cut (else glint::Error)
};

// One sample per row (pack = false) gives exactly samples.size() rows. With pack =
// true, samples are placed in order, a new row started when the next does not fit.
std::vector<Batch> collate(const std::vector<const Sample*>& samples,
                           const CollateOptions& options, int64_t max_rows_per_batch);

// Convenience: one batch with one row per sample, no packing.
Batch collate_rows(const std::vector<const Sample*>& samples, const CollateOptions& options);

}  // namespace glint
