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
  bool pad_to_longest = true;  // true: a batch is as long as its longest row (>= 2);
                               // false: every batch is seq_len long

  // Throws glint::Error naming the bad value: seq_len < 2 (no label could be trained
  // after the shift) or pad_id < 0.
  void validate() const;
};

// One sample per row (pack = false) gives exactly samples.size() rows. With pack =
// true, samples are placed in order, a new row started when the next does not fit.
// The rows are split, in order, into batches of at most max_rows_per_batch rows (the
// last may have fewer); no samples give no batches. The Batch fields are as documented
// in sample.h.
// Throws glint::Error for invalid options, max_rows_per_batch < 1, an empty sample, a
// sample whose labels and input_ids differ in length, or (truncate = false) a sample
// longer than seq_len; "sample i" in a message is the index into `samples`.
std::vector<Batch> collate(const std::vector<const Sample*>& samples,
                           const CollateOptions& options, int64_t max_rows_per_batch);

// The rows of `parts` stacked in order into one batch, shorter parts padded on the right
// to the longest (input_ids with pad_id, labels kIgnoreIndex, segment -1, position 0);
// row_tags too when every part has them. label_tokens is the sum.
Batch concat_rows(const std::vector<Batch>& parts, int64_t pad_id = 0);

// `batch` split, in order, into batches of at most max_rows rows (views), each with its
// own label_tokens and without the padding columns its rows all end with (at least 2
// columns stay).
std::vector<Batch> split_rows(const Batch& batch, int64_t max_rows);

// Convenience: one batch with one row per sample, no packing (options.pack is ignored).
// No samples give a batch of [0, S] tensors.
Batch collate_rows(const std::vector<const Sample*>& samples, const CollateOptions& options);

}  // namespace glint
