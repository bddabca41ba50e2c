#include "model/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/error.h"
#include "core/fs.h"

namespace glint {

namespace {

using nlohmann::json;

template <typename T>
bool read_field(const json& j, const std::string& where, const char* key, T* out,
                bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    GLINT_CHECK(!required, where, ": missing required field '", key, "'");
    return false;
  }
  try {
    if constexpr (std::is_same_v<T, bool>) {
      GLINT_CHECK(it->is_boolean(), where, ": field '", key, "' must be a boolean, got ",
                  it->dump());
    } else if constexpr (std::is_integral_v<T>) {
      GLINT_CHECK(it->is_number_integer(), where, ": field '", key,
                  "' must be an integer, got ", it->dump());
    } else if constexpr (std::is_floating_point_v<T>) {
      GLINT_CHECK(it->is_number(), where, ": field '", key, "' must be a number, got ",
                  it->dump());
    } else if constexpr (std::is_same_v<T, std::string>) {
      GLINT_CHECK(it->is_string(), where, ": field '", key, "' must be a string, got ",
                  it->dump());
    }
    *out = it->get<T>();
  } catch (const json::exception& e) {
    fail(where, ": field '", key, "' has the wrong type: ", e.what());
  }
  return true;
}

}  // namespace

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (num_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) !=
      mlp_only_layers.end())
    return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

void ModelConfig::validate(const std::string& where) const {
  GLINT_CHECK(model_type == "qwen3_moe" || model_type == "qwen3", where,
              ": model_type '", model_type, "' is not supported (expected qwen3_moe or qwen3)");
  auto positive = [&](const char* name, int64_t v) {
    GLINT_CHECK(v > 0, where, ": ", name, " must be positive, got ", v);
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  GLINT_CHECK(head_dim % 2 == 0, where, ": head_dim must be even for RoPE, got ", head_dim);
  GLINT_CHECK(num_attention_heads % num_key_value_heads == 0, where,
              ": num_attention_heads (", num_attention_heads,
              ") must be a multiple of num_key_value_heads (", num_key_value_heads, ")");
  GLINT_CHECK(rope_theta > 0, where, ": rope_theta must be positive, got ", rope_theta);
  GLINT_CHECK(rms_norm_eps > 0, where, ": rms_norm_eps must be positive, got ", rms_norm_eps);
  GLINT_CHECK(hidden_act == "silu", where, ": hidden_act '", hidden_act,
              "' is not supported (expected silu)");
  // Checked before is_moe_layer() below, which divides by decoder_sparse_step.
  GLINT_CHECK(num_experts >= 0, where, ": num_experts must be >= 0, got ", num_experts);
  GLINT_CHECK(num_experts == 0 || decoder_sparse_step > 0, where,
              ": decoder_sparse_step must be positive, got ", decoder_sparse_step);
  bool any_dense = false;
  for (int64_t l = 0; l < num_hidden_layers; ++l) any_dense |= !is_moe_layer(l);
  if (any_dense) positive("intermediate_size", intermediate_size);
  if (model_type == "qwen3") {
    GLINT_CHECK(num_experts == 0, where, ": model_type qwen3 is dense but num_experts is ",
                num_experts);
  }
  if (num_experts > 0) {
    positive("moe_intermediate_size", moe_intermediate_size);
    positive("num_experts_per_tok", num_experts_per_tok);
    GLINT_CHECK(num_experts_per_tok <= num_experts, where, ": num_experts_per_tok (",
                num_experts_per_tok, ") exceeds num_experts (", num_experts, ")");
  }
  for (int64_t l : mlp_only_layers)
    GLINT_CHECK(l >= 0 && l < num_hidden_layers, where, ": mlp_only_layers entry ", l,
                " is not a layer index in [0, ", num_hidden_layers, ")");
}

nlohmann::json ModelConfig::to_json() const {
  json j = {
      {"architectures", {model_type == "qwen3" ? "Qwen3ForCausalLM" : "Qwen3MoeForCausalLM"}},
      {"model_type", model_type},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"rope_theta", rope_theta},
      {"rms_norm_eps", rms_norm_eps},
      {"max_position_embeddings", max_position_embeddings},
      {"tie_word_embeddings", tie_word_embeddings},
      {"attention_bias", attention_bias},
      {"attention_dropout", 0.0},
      {"hidden_act", hidden_act},
      {"initializer_range", initializer_range},
      {"torch_dtype", torch_dtype},
      {"use_cache", true},
      {"rope_scaling", nullptr},
  };
  if (model_type == "qwen3_moe") {
    j["moe_intermediate_size"] = moe_intermediate_size;
    j["num_experts"] = num_experts;
    j["num_experts_per_tok"] = num_experts_per_tok;
    j["norm_topk_prob"] = norm_topk_prob;
    j["decoder_sparse_step"] = decoder_sparse_step;
    j["mlp_only_layers"] = mlp_only_layers;
    j["output_router_logits"] = output_router_logits;
    j["router_aux_loss_coef"] = router_aux_loss_coef;
  }
  return j;
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& where) {
  GLINT_CHECK(j.is_object(), where, ": config must be a JSON object");
  ModelConfig c;
  read_field(j, where, "model_type", &c.model_type, true);
  GLINT_CHECK(c.model_type == "qwen3_moe" || c.model_type == "qwen3", where,
              ": model_type '", c.model_type, "' is not supported (expected qwen3_moe or qwen3)");
  read_field(j, where, "vocab_size", &c.vocab_size, true);
  read_field(j, where, "hidden_size", &c.hidden_size, true);
  read_field(j, where, "num_hidden_layers", &c.num_hidden_layers, true);
  read_field(j, where, "num_attention_heads", &c.num_attention_heads, true);
  c.num_key_value_heads = c.num_attention_heads;
  read_field(j, where, "num_key_value_heads", &c.num_key_value_heads, false);
  if (!read_field(j, where, "head_dim", &c.head_dim, false)) {
    GLINT_CHECK(c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads == 0,
                where, ": no head_dim and hidden_size (", c.hidden_size,
                ") is not divisible by num_attention_heads (", c.num_attention_heads, ")");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  // transformers v5 moves rope_theta into rope_parameters.
  if (!read_field(j, where, "rope_theta", &c.rope_theta, false)) {
    auto rp = j.find("rope_parameters");
    if (rp != j.end() && rp->is_object())
      read_field(*rp, where + " (rope_parameters)", "rope_theta", &c.rope_theta, false);
  }
  for (const char* key : {"rope_scaling"}) {
    auto it = j.find(key);
    GLINT_CHECK(it == j.end() || it->is_null(), where, ": ", key,
                " is set but RoPE scaling is not supported: ", it->dump());
  }
  read_field(j, where, "rms_norm_eps", &c.rms_norm_eps, false);
  read_field(j, where, "max_position_embeddings", &c.max_position_embeddings, false);
  read_field(j, where, "tie_word_embeddings", &c.tie_word_embeddings, false);
  read_field(j, where, "attention_bias", &c.attention_bias, false);
  read_field(j, where, "hidden_act", &c.hidden_act, false);
  read_field(j, where, "initializer_range", &c.initializer_range, false);
  if (!read_field(j, where, "torch_dtype", &c.torch_dtype, false))
    read_field(j, where, "dtype", &c.torch_dtype, false);
  if (c.model_type == "qwen3_moe") {
    read_field(j, where, "num_experts", &c.num_experts, true);
    read_field(j, where, "num_experts_per_tok", &c.num_experts_per_tok, true);
    read_field(j, where, "moe_intermediate_size", &c.moe_intermediate_size, true);
    read_field(j, where, "norm_topk_prob", &c.norm_topk_prob, false);
    read_field(j, where, "decoder_sparse_step", &c.decoder_sparse_step, false);
    read_field(j, where, "output_router_logits", &c.output_router_logits, false);
    read_field(j, where, "router_aux_loss_coef", &c.router_aux_loss_coef, false);
    auto it = j.find("mlp_only_layers");
    if (it != j.end() && !it->is_null()) {
      GLINT_CHECK(it->is_array(), where, ": field 'mlp_only_layers' must be an array");
      for (const auto& v : *it) {
        GLINT_CHECK(v.is_number_integer(), where,
                    ": field 'mlp_only_layers' must hold integers, got ", v.dump());
        c.mlp_only_layers.push_back(v.get<int64_t>());
      }
    }
  }
  bool needs_dense = c.model_type == "qwen3" || c.num_experts == 0 || !c.mlp_only_layers.empty() ||
                     c.decoder_sparse_step > 1;
  read_field(j, where, "intermediate_size", &c.intermediate_size, needs_dense);
  c.validate(where);
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  return from_json(read_json_file(path), path);
}

ModelConfig tiny_moe_config(int64_t vocab_size) {
  ModelConfig c;
  c.model_type = "qwen3_moe";
  c.vocab_size = vocab_size;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.moe_intermediate_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.rope_theta = 10000.0;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.max_position_embeddings = 4096;
  // Wider than transformers' 0.02: with a frozen random lm_head, 0.02 caps the logit
  // range (|w| |h| ~ 0.02 * H) so far below what a LoRA can make confident.
  c.initializer_range = 0.1;
  c.validate("tiny_moe_config");
  return c;
}

}  // namespace glint
