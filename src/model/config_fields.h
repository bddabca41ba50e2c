// Reading config.json fields for the families' config mappings: each field checked for
// presence and type, the file and the field named in the error.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "model/config.h"

namespace glint::config_fields {

// Reads j[key] into *out when present and not null; returns whether it did. A missing
// required field or a wrongly typed one throws glint::Error naming `where` and the key.
template <typename T>
bool read(const nlohmann::json& j, const std::string& where, const char* key, T* out, bool required = false) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    GLINT_CHECK(!required, where, ": missing required field '", key, "'");
    return false;
  }
  if constexpr (std::is_same_v<T, bool>) {
    GLINT_CHECK(it->is_boolean(), where, ": field '", key, "' must be a boolean, got ", it->dump());
  } else if constexpr (std::is_integral_v<T>) {
    GLINT_CHECK(it->is_number_integer(), where, ": field '", key, "' must be an integer, got ", it->dump());
  } else if constexpr (std::is_floating_point_v<T>) {
    GLINT_CHECK(it->is_number(), where, ": field '", key, "' must be a number, got ", it->dump());
  } else if constexpr (std::is_same_v<T, std::string>) {
    GLINT_CHECK(it->is_string(), where, ": field '", key, "' must be a string, got ", it->dump());
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    GLINT_CHECK(it->is_array(), where, ": field '", key, "' must be an array, got ", it->dump());
    for (const auto& v : *it)
      GLINT_CHECK(v.is_number_integer(), where, ": field '", key, "' must hold integers, got ", v.dump());
  }
  *out = it->get<T>();
  return true;
}

// The fields every decoder family reads: sizes, heads, norms, embeddings, dtype, and
// rope_theta (top level, or in v5's rope_parameters).
void read_common(const nlohmann::json& j, const std::string& where, ModelConfig* c);
// The RoPE block a config holds: "rope_scaling" (older files) over "rope_parameters"
// (transformers v5), null when neither; its field name in *field. Not an object: an error.
const nlohmann::json* rope_block(const nlohmann::json& j, const std::string& where, std::string* field);
// Its type: "rope_type" or "type", "default" when absent.
std::string rope_type(const nlohmann::json& block, const std::string& where);
// The RoPE scaling block ("rope_scaling", or v5's "rope_parameters" with a rope_type other
// than "default"): none, or YaRN when `yarn_allowed`; anything else is refused by name.
void read_rope_scaling(const nlohmann::json& j, const std::string& where, bool yarn_allowed, ModelConfig* c);
// RoPE on the first head_dim * partial_rotary_factor dims (Qwen3.5-MoE, Qwen3-Next,
// GLM-4.5): rope_theta and partial_rotary_factor (default: the family's) from the RoPE block (rope_block)
// over the top level. A block whose type is not one of `types` is refused by name.
void read_partial_rope(const nlohmann::json& j, const std::string& where, const std::vector<std::string>& types,
                       ModelConfig* c, double default_factor = 0.25);
// head_dim from config.json, else hidden_size / num_attention_heads (which must divide it).
void read_head_dim(const nlohmann::json& j, const std::string& where, ModelConfig* c);
// Partial RoPE's check: head_dim * partial_rotary_factor rotary dims, an even number > 0.
void validate_partial_rotary(const ModelConfig& c, const std::string& where);
// Group-limited routing's checks (DeepSeek-V3's router, GLM-4.5's): n_group divides the
// experts into groups of at least two, topk_group in [1, n_group], the top-k within the
// kept groups' experts, a positive routed_scaling_factor.
void validate_group_routing(const ModelConfig& c, const std::string& where);
// The RoPE scaling as config.json's "rope_scaling" holds it: null when there is none.
nlohmann::json rope_scaling_json(const ModelConfig::RopeScaling& r);
// A "quantization_config" of the FP8 form the weight map dequantises (DeepSeek-V3, -V4):
// quant_method fp8, fmt e4m3, scale_fmt ue8m0 or float32, weight_block_size [128, 128].
// Anything else is refused by name.
void read_fp8_quantization(const nlohmann::json& q, const std::string& where);
// The checks every family shares: positive sizes, heads dividing, eps, activation.
void validate_common(const ModelConfig& c, const std::string& where);
// The fields of read_common as config.json holds them.
nlohmann::json common_json(const ModelConfig& c);
// The fields every Hugging Face config may hold whatever its family, read from the top
// level of config.json `top`, else from its "text_config" object (a multimodal release):
// bos_token_id, pad_token_id, eos_token_id (an int or a list of them), and the dtype
// when the family read none from text_config (it reads the text model's fields there).
// A wrongly typed one throws glint::Error naming `where` and the field.
void read_hub_fields(const nlohmann::json& top, const std::string& where, ModelConfig* c);
// Adds the special token ids of read_hub_fields that c holds to a config.json object.
void hub_fields_json(const ModelConfig& c, nlohmann::json* j);

}  // namespace glint::config_fields
