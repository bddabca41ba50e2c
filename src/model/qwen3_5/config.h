// The own config fields of the hybrid families, Qwen3.5-MoE and Qwen3-Next (which
// shares Qwen3.5's modules): the Gated DeltaNet sizes (model/qwen3_5/gated_delta.h) and
// the reading, writing and checking of their hybrid layer kinds.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

#include "model/config.h"

namespace glint {

struct GatedDeltaNetFields : FamilyFieldsOf<GatedDeltaNetFields> {
  int64_t linear_num_key_heads = 0, linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0, linear_value_head_dim = 0, linear_conv_kernel_dim = 0;
};

inline const GatedDeltaNetFields& delta_net(const ModelConfig& c) { return c.fields<GatedDeltaNetFields>(); }
inline GatedDeltaNetFields& delta_net(ModelConfig& c) { return c.fields<GatedDeltaNetFields>(); }

namespace config_fields {

// The hybrid layer kinds of Qwen3.5-MoE and Qwen3-Next, as layer_types names them.
inline constexpr const char* kFullAttention = "full_attention";
inline constexpr const char* kLinearAttention = "linear_attention";
// The hybrid layer kinds (kLinearAttention / kFullAttention) of Qwen3.5-MoE and
// Qwen3-Next into c->layer_types: from "layer_types" (the legacy "mamba" and "attention"
// remapped), else layer l is full attention iff (l + 1) % full_attention_interval == 0
// (default 4). Needs c->num_hidden_layers; the kinds and their count are the family's to check.
void read_hybrid_layer_types(const nlohmann::json& j, const std::string& where, ModelConfig* c);
// The fields read_hybrid_layer_types and the hybrid families read, as config.json holds
// them: layer_types, the Gated DeltaNet sizes, the experts, the shared expert's width and
// the router loss settings.
void hybrid_json(const ModelConfig& c, nlohmann::json* j);
// The checks of the hybrid layers (Qwen3.5-MoE, Qwen3-Next): head_dim, the Gated DeltaNet
// sizes (value heads a multiple of key heads), an even, nonzero number of rotary dims, and
// one known kind per layer in layer_types.
void validate_hybrid_layers(const ModelConfig& c, const std::string& where);

}  // namespace config_fields

}  // namespace glint
