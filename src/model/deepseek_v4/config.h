// DeepSeek-V4's own config fields: its attention's query rank and rotary width, the
// compression rates of its compressed layers, the indexer of the sparse ones, the
// grouped low-rank output and the compressed layers' RoPE base. The hyper-connection
// streams, the sliding window, hash routing and the SwiGLU clamp are the shared
// decoder's (model/config.h).
#pragma once

#include <cstdint>

#include "model/config.h"

namespace glint {

struct DeepseekV4Fields : FamilyFieldsOf<DeepseekV4Fields> {
  int64_t q_lora_rank = 0;
  int64_t qk_rope_head_dim = 0;  // the rotary dims at the end of each head
  int64_t compress_rate_csa = 4, compress_rate_hca = 128;
  int64_t index_n_heads = 0, index_head_dim = 0, index_topk = 0;
  int64_t o_groups = 0, o_lora_rank = 0;
  double compress_rope_theta = 0.0;
};

inline const DeepseekV4Fields& v4(const ModelConfig& c) { return c.fields<DeepseekV4Fields>(); }
inline DeepseekV4Fields& v4(ModelConfig& c) { return c.fields<DeepseekV4Fields>(); }

}  // namespace glint
