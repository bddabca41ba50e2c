// Token-level training data: samples and the batches built from them.
//
// Legend: B sequences in a batch, S sequence length.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace glint {

constexpr int64_t kIgnoreIndex = -100;  // label value that is not trained on

// One training example. labels are aligned with input_ids as in Hugging Face: the
// model shifts them (position i predicts token i + 1); kIgnoreIndex is not trained.
// labels.size() == input_ids.size() > 0.
struct Sample {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;
  int64_t line = 0;  // 1-based line of the data file it came from; 0 when not from a file
};

// A batch of B rows of S tokens (all int64, on CPU).
struct Batch {
  at::Tensor input_ids;     // [B, S]; padding holds pad_id
  at::Tensor labels;        // [B, S]; kIgnoreIndex on padding and, when packed, on
                            //         the first token of every sample (the row's
                            //         first label is dropped by the shift anyway)
  at::Tensor position_ids;  // [B, S]; restart at 0 for each sample; 0 on padding
  at::Tensor segment_ids;   // [B, S]; sample index within its row (0, 1, ...); -1 on
                            //         padding. A token attends only to earlier tokens
                            //         of the same segment.
  int64_t label_tokens = 0;  // number of labels that contribute to the loss after the
                             // model's shift (labels[:, 1:] != kIgnoreIndex)
  at::Tensor row_tags;       // [B] int64 tenant slot of each row (multi-tenant LoRA), or
                             // undefined
};

}  // namespace glint
