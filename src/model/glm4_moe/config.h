// GLM-4.5/4.6's own config fields: RMSNorm on each query and key head, and the count
// of multi-token-prediction layers its releases store after the decoder's.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace glint {

struct Glm4MoeFields : FamilyFieldsOf<Glm4MoeFields> {
  bool use_qk_norm = false;              // q_norm / k_norm over head_dim before RoPE
  int64_t num_nextn_predict_layers = 0;  // layers num_hidden_layers.. on disk: skipped
};

inline const Glm4MoeFields& glm(const ModelConfig& c) { return c.fields<Glm4MoeFields>(); }
inline Glm4MoeFields& glm(ModelConfig& c) { return c.fields<Glm4MoeFields>(); }

}  // namespace glint
