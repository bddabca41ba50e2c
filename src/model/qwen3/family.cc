#include "model/qwen3/family.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config_fields.h"
#include "model/adaptable.h"
#include "model/expert_keys.h"
#include "model/moe.h"
#include "model/qwen3/attention.h"

namespace glint {

namespace {

using nlohmann::json;
namespace cf = config_fields;

class Qwen3Family : public ModelFamily {
 public:
  std::string name() const override { return "qwen3"; }
  std::vector<std::string> model_types() const override { return {"qwen3_moe", "qwen3"}; }

  ModelConfig from_json(const json& j, const std::string& where) const override {
    ModelConfig c;
    cf::read(j, where, "model_type", &c.model_type, true);
    cf::read_common(j, where, &c);
    cf::read_head_dim(j, where, &c);
    cf::read_rope_scaling(j, where, /*yarn_allowed=*/false, &c);
    if (c.model_type == "qwen3_moe") {
      cf::read(j, where, "num_experts", &c.num_experts, true);
      cf::read(j, where, "num_experts_per_tok", &c.num_experts_per_tok, true);
      cf::read(j, where, "moe_intermediate_size", &c.moe_intermediate_size, true);
      cf::read(j, where, "norm_topk_prob", &c.norm_topk_prob);
      cf::read(j, where, "decoder_sparse_step", &c.decoder_sparse_step);
      cf::read(j, where, "output_router_logits", &c.output_router_logits);
      cf::read(j, where, "router_aux_loss_coef", &c.router_aux_loss_coef);
      cf::read(j, where, "mlp_only_layers", &c.mlp_only_layers);
    }
    bool needs_dense = c.model_type == "qwen3" || c.num_experts == 0 || !c.mlp_only_layers.empty() ||
                       c.decoder_sparse_step > 1;
    cf::read(j, where, "intermediate_size", &c.intermediate_size, needs_dense);
    validate(c, where);
    return c;
  }

  json to_json(const ModelConfig& c) const override {
    json j = cf::common_json(c);
    j["architectures"] = {c.model_type == "qwen3" ? "Qwen3ForCausalLM" : "Qwen3MoeForCausalLM"};
    j["intermediate_size"] = c.intermediate_size;
    j["head_dim"] = c.head_dim;
    j["rope_scaling"] = nullptr;
    if (c.model_type == "qwen3_moe") {
      j["moe_intermediate_size"] = c.moe_intermediate_size;
      j["num_experts"] = c.num_experts;
      j["num_experts_per_tok"] = c.num_experts_per_tok;
      j["norm_topk_prob"] = c.norm_topk_prob;
      j["decoder_sparse_step"] = c.decoder_sparse_step;
      j["mlp_only_layers"] = c.mlp_only_layers;
      j["output_router_logits"] = c.output_router_logits;
      j["router_aux_loss_coef"] = c.router_aux_loss_coef;
    }
    return j;
  }

  void validate(const ModelConfig& c, const std::string& where) const override {
    GLINT_CHECK(c.model_type == "qwen3_moe" || c.model_type == "qwen3", where, ": model_type '", c.model_type,
                "' is not a qwen3 family type");
    cf::validate_common(c, where);
    GLINT_CHECK(c.head_dim > 0, where, ": head_dim must be positive, got ", c.head_dim);
    GLINT_CHECK(c.head_dim % 2 == 0, where, ": head_dim must be even for RoPE, got ", c.head_dim);
    // Checked before is_moe_layer() below, which divides by decoder_sparse_step.
    GLINT_CHECK(c.num_experts == 0 || c.decoder_sparse_step > 0, where, ": decoder_sparse_step must be positive, got ",
                c.decoder_sparse_step);
    GLINT_CHECK(c.rope_scaling.type.empty(), where, ": RoPE scaling is not supported for ", c.model_type);
    GLINT_CHECK(c.scoring_func == "softmax" && c.n_group == 1 && c.n_shared_experts == 0 &&
                    c.first_k_dense_replace == 0 && c.moe_layer_freq == 1 && !c.family_fields.get(),
                where, ": fields of another family are set on a ", c.model_type, " config");
    bool any_dense = false;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) any_dense |= !c.is_moe_layer(l);
    if (any_dense)
      GLINT_CHECK(c.intermediate_size > 0, where, ": intermediate_size must be positive, got ", c.intermediate_size);
    if (c.model_type == "qwen3")
      GLINT_CHECK(c.num_experts == 0, where, ": model_type qwen3 is dense but num_experts is ", c.num_experts);
    for (int64_t l : c.mlp_only_layers)
      GLINT_CHECK(l >= 0 && l < c.num_hidden_layers, where, ": mlp_only_layers entry ", l,
                  " is not a layer index in [0, ", c.num_hidden_layers, ")");
  }

  LayerParts make_layer(const ModelConfig& c, int64_t layer, const TensorPlacement& p) const override {
    LayerParts parts;
    parts.attention = Attention(c, p).ptr();
    if (c.is_moe_layer(layer)) parts.mlp = MoeBlock(c, p).ptr();
    else parts.mlp = DenseMlp(c.hidden_size, c.intermediate_size, p).ptr();
    return parts;
  }

  std::vector<RotaryTables> rotary(const ModelConfig& c, const at::Tensor& position_ids,
                                   c10::ScalarType compute) const override {
    return {rotary_tables(position_ids, c.head_dim, c.rope_theta, compute)};
  }

  ModelConfig tiny(int64_t vocab_size) const override {
    ModelConfig c = tiny_moe_config(vocab_size);
    c.mlp_only_layers = {0};  // one dense layer, one MoE layer
    c.num_key_value_heads = 2;
    return c;
  }

  std::vector<std::string> lora_targets() const override {
    return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
            expert_target("gate_up_proj"), expert_target("down_proj")};
  }

  // Qwen3-MoE releases: per-expert keys (Qwen/Qwen3-30B-A3B); transformers v5 packs them in memory as below.
  const ExpertKeys& expert_keys() const override {
    static const SpelledExpertKeys keys(ExpertSpelling{
        "model.layers", "mlp", "experts", "gate_proj", "up_proj", "down_proj", "gate_up_proj", "down_proj"});
    return keys;
  }
};

}  // namespace

const ModelFamily& qwen3_family() {
  static const Qwen3Family family;
  return family;
}

}  // namespace glint
