// DeepSeek-V3's own config fields: the sizes of multi-head latent attention
// (model/deepseek_v3/attention.h), as config.json names them.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace glint {

struct DeepseekV3Fields : FamilyFieldsOf<DeepseekV3Fields> {
  int64_t q_lora_rank = 0;  // 0 (config.json null): a plain q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
};

inline const DeepseekV3Fields& mla(const ModelConfig& c) { return c.fields<DeepseekV3Fields>(); }
inline DeepseekV3Fields& mla(ModelConfig& c) { return c.fields<DeepseekV3Fields>(); }

}  // namespace glint
