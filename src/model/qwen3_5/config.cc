#include "model/qwen3_5/config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config_fields.h"

namespace glint::config_fields {

using nlohmann::json;

void read_hybrid_layer_types(const json& j, const std::string& where, ModelConfig* c) {
  c->layer_types.clear();
  auto types = j.find("layer_types");
  if (types != j.end() && !types->is_null()) {
    GLINT_CHECK(types->is_array(), where, ": field 'layer_types' must be an array, got ", types->dump());
    for (const auto& t : *types) {
      GLINT_CHECK(t.is_string(), where, ": field 'layer_types' must hold strings, got ", t.dump());
      std::string kind = t.get<std::string>();
      if (kind == "mamba") kind = kLinearAttention;  // the legacy names
      if (kind == "attention") kind = kFullAttention;
      c->layer_types.push_back(kind);
    }
    return;
  }
  int64_t interval = 4;
  read(j, where, "full_attention_interval", &interval);
  GLINT_CHECK(interval > 0, where, ": full_attention_interval must be positive, got ", interval);
  for (int64_t l = 0; l < c->num_hidden_layers; ++l)
    c->layer_types.push_back((l + 1) % interval == 0 ? kFullAttention : kLinearAttention);
}

void validate_hybrid_layers(const ModelConfig& c, const std::string& where) {
  auto positive = [&](const char* name, int64_t v) {
    GLINT_CHECK(v > 0, where, ": ", name, " must be positive, got ", v);
  };
  positive("head_dim", c.head_dim);
  positive("linear_num_key_heads", delta_net(c).linear_num_key_heads);
  positive("linear_num_value_heads", delta_net(c).linear_num_value_heads);
  positive("linear_key_head_dim", delta_net(c).linear_key_head_dim);
  positive("linear_value_head_dim", delta_net(c).linear_value_head_dim);
  positive("linear_conv_kernel_dim", delta_net(c).linear_conv_kernel_dim);
  GLINT_CHECK(delta_net(c).linear_num_value_heads % delta_net(c).linear_num_key_heads == 0, where, ": linear_num_value_heads (",
              delta_net(c).linear_num_value_heads, ") must be a multiple of linear_num_key_heads (", delta_net(c).linear_num_key_heads, ")");
  validate_partial_rotary(c, where);
  GLINT_CHECK(int64_t(c.layer_types.size()) == c.num_hidden_layers, where, ": layer_types has ", c.layer_types.size(),
              " entries for ", c.num_hidden_layers, " layers");
  for (const auto& t : c.layer_types)
    GLINT_CHECK(t == kFullAttention || t == kLinearAttention, where, ": layer type '", t,
                "' is not supported (expected ", kFullAttention, " or ", kLinearAttention, ")");
}

void hybrid_json(const ModelConfig& c, json* j) {
  json& o = *j;
  o["layer_types"] = c.layer_types;
  o["linear_num_key_heads"] = delta_net(c).linear_num_key_heads;
  o["linear_num_value_heads"] = delta_net(c).linear_num_value_heads;
  o["linear_key_head_dim"] = delta_net(c).linear_key_head_dim;
  o["linear_value_head_dim"] = delta_net(c).linear_value_head_dim;
  o["linear_conv_kernel_dim"] = delta_net(c).linear_conv_kernel_dim;
  o["num_experts"] = c.num_experts;
  o["num_experts_per_tok"] = c.num_experts_per_tok;
  o["moe_intermediate_size"] = c.moe_intermediate_size;
  o["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
  o["output_router_logits"] = c.output_router_logits;
  o["router_aux_loss_coef"] = c.router_aux_loss_coef;
}

}  // namespace glint::config_fields
