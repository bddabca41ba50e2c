#include "model/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/fs.h"
#include "model/config_fields.h"
#include "model/family.h"

namespace glint {

using nlohmann::json;

namespace config_fields {

void read_common(const json& j, const std::string& where, ModelConfig* c) {
  read(j, where, "vocab_size", &c->vocab_size, true);
  read(j, where, "hidden_size", &c->hidden_size, true);
  read(j, where, "num_hidden_layers", &c->num_hidden_layers, true);
  read(j, where, "num_attention_heads", &c->num_attention_heads, true);
  c->num_key_value_heads = c->num_attention_heads;
  read(j, where, "num_key_value_heads", &c->num_key_value_heads);
  // transformers v5 moves rope_theta into rope_parameters.
  if (!read(j, where, "rope_theta", &c->rope_theta)) {
    auto rp = j.find("rope_parameters");
    if (rp != j.end() && rp->is_object()) read(*rp, where + " (rope_parameters)", "rope_theta", &c->rope_theta);
  }
  read(j, where, "rms_norm_eps", &c->rms_norm_eps);
  read(j, where, "max_position_embeddings", &c->max_position_embeddings);
  read(j, where, "tie_word_embeddings", &c->tie_word_embeddings);
  read(j, where, "attention_bias", &c->attention_bias);
  read(j, where, "hidden_act", &c->hidden_act);
  read(j, where, "initializer_range", &c->initializer_range);
  if (!read(j, where, "torch_dtype", &c->torch_dtype)) read(j, where, "dtype", &c->torch_dtype);
}

const json* rope_block(const json& j, const std::string& where, std::string* field) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    GLINT_CHECK(it->is_object(), where, ": field '", key, "' must be an object, got ", it->dump());
    *field = key;
    return &*it;
  }
  return nullptr;
}

std::string rope_type(const json& block, const std::string& where) {
  std::string type = "default";
  for (const char* t : {"rope_type", "type"})
    if (block.contains(t)) read(block, where, t, &type);
  return type;
}

void read_rope_scaling(const json& j, const std::string& where, bool yarn_allowed, ModelConfig* c) {
  std::string field;
  const json* block = rope_block(j, where, &field);
  if (!block) return;
  std::string type = rope_type(*block, where + " (" + field + ")");
  if (type == "default") return;
  c->rope_scaling.type = type;
  const std::string w = where + " (" + field + ")";
  read(*block, w, "rope_theta", &c->rope_theta);  // the block's own wins over the top level
  GLINT_CHECK(yarn_allowed && c->rope_scaling.type == "yarn", w, ": RoPE scaling '", c->rope_scaling.type,
              "' is not supported for model_type ", c->model_type, yarn_allowed ? " (only yarn)" : "");
  auto& r = c->rope_scaling;
  read(*block, w, "factor", &r.factor, true);
  read(*block, w, "original_max_position_embeddings", &r.original_max_position_embeddings, true);
  read(*block, w, "beta_fast", &r.beta_fast);
  read(*block, w, "beta_slow", &r.beta_slow);
  read(*block, w, "mscale", &r.mscale);
  read(*block, w, "mscale_all_dim", &r.mscale_all_dim);
  read(*block, w, "attention_factor", &r.attention_factor);
  read(*block, w, "truncate", &r.truncate);
  GLINT_CHECK(r.factor >= 1.0, w, ": factor must be >= 1, got ", r.factor);
  GLINT_CHECK(r.original_max_position_embeddings > 0, w, ": original_max_position_embeddings must be positive, got ",
              r.original_max_position_embeddings);
  GLINT_CHECK(r.beta_fast > r.beta_slow && r.beta_slow > 0, w, ": need beta_fast > beta_slow > 0, got ",
              r.beta_fast, " and ", r.beta_slow);
}

void read_partial_rope(const json& j, const std::string& where, const std::vector<std::string>& types,
                       ModelConfig* c, double default_factor) {
  c->partial_rotary_factor = default_factor;
  read(j, where, "partial_rotary_factor", &c->partial_rotary_factor);
  std::string field;
  const json* rope = rope_block(j, where, &field);
  if (!rope) return;
  const std::string w = where + " (" + field + ")";
  const std::string type = rope_type(*rope, w);
  std::string expected;
  for (const std::string& t : types) expected += (expected.empty() ? "" : ", ") + t;
  GLINT_CHECK(std::find(types.begin(), types.end(), type) != types.end(), w, ": RoPE type '", type,
              "' is not supported for ", c->model_type, " (expected one of: ", expected, ")");
  read(*rope, w, "rope_theta", &c->rope_theta);
  read(*rope, w, "partial_rotary_factor", &c->partial_rotary_factor);
}

void read_head_dim(const json& j, const std::string& where, ModelConfig* c) {
  if (read(j, where, "head_dim", &c->head_dim)) return;
  GLINT_CHECK(c->num_attention_heads > 0 && c->hidden_size % c->num_attention_heads == 0, where,
              ": no head_dim and hidden_size (", c->hidden_size, ") is not divisible by num_attention_heads (",
              c->num_attention_heads, ")");
  c->head_dim = c->hidden_size / c->num_attention_heads;
}

void validate_partial_rotary(const ModelConfig& c, const std::string& where) {
  const int64_t R = int64_t(double(c.head_dim) * c.partial_rotary_factor);
  GLINT_CHECK(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1 && R % 2 == 0 && R > 0, where,
              ": partial_rotary_factor ", c.partial_rotary_factor, " gives ", R, " rotary dims of head_dim ", c.head_dim,
              " (need an even number > 0)");
}

void validate_group_routing(const ModelConfig& c, const std::string& where) {
  GLINT_CHECK(c.n_group > 0 && c.num_experts % c.n_group == 0, where, ": n_group (", c.n_group,
              ") must divide n_routed_experts (", c.num_experts, ")");
  GLINT_CHECK(c.n_group == 1 || c.num_experts / c.n_group >= 2, where,
              ": each of the n_group groups needs at least 2 experts (a group scores its best two), got ",
              c.num_experts / c.n_group);
  GLINT_CHECK(c.topk_group >= 1 && c.topk_group <= c.n_group, where, ": topk_group (", c.topk_group,
              ") must be in [1, n_group = ", c.n_group, "]");
  GLINT_CHECK(c.num_experts_per_tok <= c.topk_group * (c.num_experts / c.n_group), where,
              ": num_experts_per_tok (", c.num_experts_per_tok, ") exceeds the experts of the topk_group groups (",
              c.topk_group * (c.num_experts / c.n_group), ")");
  GLINT_CHECK(c.routed_scaling_factor > 0, where, ": routed_scaling_factor must be positive, got ",
              c.routed_scaling_factor);
}

json rope_scaling_json(const ModelConfig::RopeScaling& r) {
  if (r.type.empty()) return nullptr;
  json rs = {{"type", r.type},
             {"rope_type", r.type},
             {"factor", r.factor},
             {"original_max_position_embeddings", r.original_max_position_embeddings},
             {"beta_fast", r.beta_fast},
             {"beta_slow", r.beta_slow}};
  if (r.mscale != 0) rs["mscale"] = r.mscale;
  if (r.mscale_all_dim != 0) rs["mscale_all_dim"] = r.mscale_all_dim;
  if (r.attention_factor > 0) rs["attention_factor"] = r.attention_factor;
  if (!r.truncate) rs["truncate"] = false;
  return rs;
}

void read_fp8_quantization(const json& q, const std::string& where) {
  GLINT_CHECK(q.is_object(), where, ": must be an object, got ", q.dump());
  std::string method;
  read(q, where, "quant_method", &method, true);
  GLINT_CHECK(method == "fp8", where, ": quant_method '", method, "' is not supported (expected fp8)");
  std::string fmt = "e4m3";
  read(q, where, "fmt", &fmt);
  GLINT_CHECK(fmt == "e4m3", where, ": fmt '", fmt, "' is not supported (expected e4m3)");
  std::string scale_fmt = "float32";
  read(q, where, "scale_fmt", &scale_fmt);
  GLINT_CHECK(scale_fmt == "ue8m0" || scale_fmt == "float32", where, ": scale_fmt '", scale_fmt,
              "' is not supported (expected ue8m0 or float32)");
  std::vector<int64_t> block = {128, 128};
  read(q, where, "weight_block_size", &block);
  GLINT_CHECK(block == std::vector<int64_t>({128, 128}), where, ": weight_block_size ", json(block).dump(),
              " is not supported (expected [128, 128])");
}

void validate_common(const ModelConfig& c, const std::string& where) {
  auto positive = [&](const char* name, int64_t v) {
    GLINT_CHECK(v > 0, where, ": ", name, " must be positive, got ", v);
  };
  positive("vocab_size", c.vocab_size);
  positive("hidden_size", c.hidden_size);
  positive("num_hidden_layers", c.num_hidden_layers);
  positive("num_attention_heads", c.num_attention_heads);
  positive("num_key_value_heads", c.num_key_value_heads);
  GLINT_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, where, ": num_attention_heads (",
              c.num_attention_heads, ") must be a multiple of num_key_value_heads (", c.num_key_value_heads, ")");
  GLINT_CHECK(c.rope_theta > 0, where, ": rope_theta must be positive, got ", c.rope_theta);
  GLINT_CHECK(c.rms_norm_eps > 0, where, ": rms_norm_eps must be positive, got ", c.rms_norm_eps);
  GLINT_CHECK(c.hidden_act == "silu", where, ": hidden_act '", c.hidden_act, "' is not supported (expected silu)");
  GLINT_CHECK(c.num_experts >= 0, where, ": num_experts must be >= 0, got ", c.num_experts);
  if (c.num_experts > 0) {
    positive("moe_intermediate_size", c.moe_intermediate_size);
    positive("num_experts_per_tok", c.num_experts_per_tok);
    GLINT_CHECK(c.num_experts_per_tok <= c.num_experts, where, ": num_experts_per_tok (", c.num_experts_per_tok,
                ") exceeds num_experts (", c.num_experts, ")");
  }
}

json common_json(const ModelConfig& c) {
  return {
      {"model_type", c.model_type},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"rope_theta", c.rope_theta},
      {"rms_norm_eps", c.rms_norm_eps},
      {"max_position_embeddings", c.max_position_embeddings},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.attention_bias},
      {"attention_dropout", 0.0},
      {"hidden_act", c.hidden_act},
      {"initializer_range", c.initializer_range},
      {"torch_dtype", c.torch_dtype},
      {"use_cache", true},
  };
}

void read_hub_fields(const json& top, const std::string& where, ModelConfig* c) {
  auto text = top.find("text_config");
  const json* nested = text != top.end() && text->is_object() ? &*text : nullptr;
  const std::string nested_where = where + " (text_config)";
  auto has = [](const json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && !it->is_null();
  };
  // The object holding `key` (the top level first), with its name for errors; null if none.
  auto holder = [&](const char* key) -> std::pair<const json*, const std::string*> {
    if (has(top, key)) return {&top, &where};
    if (nested && has(*nested, key)) return {nested, &nested_where};
    return {nullptr, nullptr};
  };
  for (auto [key, out] : {std::pair{"bos_token_id", &c->bos_token_id}, std::pair{"pad_token_id", &c->pad_token_id}}) {
    auto [j, w] = holder(key);
    int64_t id = 0;
    if (j && read(*j, *w, key, &id)) *out = id;
  }
  if (auto [j, w] = holder("eos_token_id"); j) {
    c->eos_token_id_is_list = j->at("eos_token_id").is_array();
    if (c->eos_token_id_is_list) {
      read(*j, *w, "eos_token_id", &c->eos_token_id);
    } else {
      int64_t id = 0;
      read(*j, *w, "eos_token_id", &id);
      c->eos_token_id = {id};
    }
  }
  if (nested && !has(*nested, "torch_dtype") && !has(*nested, "dtype"))
    if (!read(top, where, "torch_dtype", &c->torch_dtype)) read(top, where, "dtype", &c->torch_dtype);
}

void hub_fields_json(const ModelConfig& c, json* j) {
  json& o = *j;
  if (c.bos_token_id) o["bos_token_id"] = *c.bos_token_id;
  if (!c.eos_token_id.empty())
    o["eos_token_id"] = c.eos_token_id_is_list || c.eos_token_id.size() > 1 ? json(c.eos_token_id)
                                                                             : json(c.eos_token_id[0]);
  if (c.pad_token_id) o["pad_token_id"] = *c.pad_token_id;
}

}  // namespace config_fields

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (num_experts <= 0 || layer < first_k_dense_replace) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return (layer + 1) % decoder_sparse_step == 0 && layer % moe_layer_freq == 0;
}

void ModelConfig::validate(const std::string& where) const {
  family_for(model_type, where).validate(*this, where);
}

json ModelConfig::to_json() const {
  json j = family_for(model_type, "model config").to_json(*this);
  config_fields::hub_fields_json(*this, &j);
  return j;
}

ModelConfig ModelConfig::from_json(const json& j, const std::string& where) {
  GLINT_CHECK(j.is_object(), where, ": config must be a JSON object");
  std::string model_type;
  config_fields::read(j, where, "model_type", &model_type, true);
  ModelConfig c = family_for(model_type, where).from_json(j, where);
  config_fields::read_hub_fields(j, where, &c);
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) { return from_json(read_json_file(path), path); }

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
