#include "model/qwen3_next/family.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config_fields.h"
#include "model/adaptable.h"
#include "model/expert_keys.h"
#include "model/mlp.h"
#include "model/moe.h"
#include "model/qwen3_5/attention.h"
#include "model/qwen3_5/config.h"

namespace glint {

namespace {

using nlohmann::json;
namespace cf = config_fields;

constexpr const char* kQwen3NextType = "qwen3_next";

class Qwen3NextFamily : public ModelFamily {
 public:
  std::string name() const override { return "qwen3_next"; }
  std::vector<std::string> model_types() const override { return {kQwen3NextType}; }

  ModelConfig from_json(const json& j, const std::string& where) const override {
    ModelConfig c;
    cf::read(j, where, "model_type", &c.model_type, true);
    // Qwen3NextConfig's defaults (the 80B-A3B sizes) for the fields a file may leave out.
    c.head_dim = 256;
    c.intermediate_size = 5632;
    delta_net(c).linear_num_key_heads = 16;
    delta_net(c).linear_num_value_heads = 32;
    delta_net(c).linear_key_head_dim = 128;
    delta_net(c).linear_value_head_dim = 128;
    delta_net(c).linear_conv_kernel_dim = 4;
    c.moe_intermediate_size = 512;
    c.shared_expert_intermediate_size = 512;
    c.num_experts = 512;
    c.num_experts_per_tok = 10;
    cf::read_common(j, where, &c);
    if (!j.contains("num_key_value_heads")) c.num_key_value_heads = 2;
    cf::read(j, where, "head_dim", &c.head_dim);
    cf::read(j, where, "intermediate_size", &c.intermediate_size);
    cf::read_partial_rope(j, where, {"default"}, &c);
    cf::read(j, where, "linear_num_key_heads", &delta_net(c).linear_num_key_heads);
    cf::read(j, where, "linear_num_value_heads", &delta_net(c).linear_num_value_heads);
    cf::read(j, where, "linear_key_head_dim", &delta_net(c).linear_key_head_dim);
    cf::read(j, where, "linear_value_head_dim", &delta_net(c).linear_value_head_dim);
    cf::read(j, where, "linear_conv_kernel_dim", &delta_net(c).linear_conv_kernel_dim);
    cf::read(j, where, "num_experts", &c.num_experts);
    cf::read(j, where, "num_experts_per_tok", &c.num_experts_per_tok);
    cf::read(j, where, "moe_intermediate_size", &c.moe_intermediate_size);
    cf::read(j, where, "shared_expert_intermediate_size", &c.shared_expert_intermediate_size);
    cf::read(j, where, "norm_topk_prob", &c.norm_topk_prob);
    cf::read(j, where, "decoder_sparse_step", &c.decoder_sparse_step);
    cf::read(j, where, "mlp_only_layers", &c.mlp_only_layers);
    cf::read(j, where, "output_router_logits", &c.output_router_logits);
    cf::read(j, where, "router_aux_loss_coef", &c.router_aux_loss_coef);
    cf::read_hybrid_layer_types(j, where, &c);
    c.norm_unit_offset = true;
    validate(c, where);
    return c;
  }

  json to_json(const ModelConfig& c) const override {
    // RoPE as the release's config.json holds it: rope_theta and partial_rotary_factor at
    // the top level (read so by transformers before and after v5).
    json j = cf::common_json(c);
    j["architectures"] = {"Qwen3NextForCausalLM"};
    j["head_dim"] = c.head_dim;
    j["intermediate_size"] = c.intermediate_size;
    j["partial_rotary_factor"] = c.partial_rotary_factor;
    j["rope_scaling"] = nullptr;
    cf::hybrid_json(c, &j);
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
    return j;
  }

  void validate(const ModelConfig& c, const std::string& where) const override {
    GLINT_CHECK(c.model_type == kQwen3NextType, where, ": model_type '", c.model_type, "' is not ", kQwen3NextType);
    cf::validate_common(c, where);
    GLINT_CHECK(c.holds_fields<GatedDeltaNetFields>(), where, ": fields of another family are set on a ", kQwen3NextType,
                " config");
    cf::validate_hybrid_layers(c, where);
    GLINT_CHECK(c.rope_scaling.type.empty(), where, ": RoPE scaling is not supported for ", kQwen3NextType);
    GLINT_CHECK(c.scoring_func == "softmax" && c.n_group == 1 && c.n_shared_experts == 0 &&
                    c.first_k_dense_replace == 0 && c.moe_layer_freq == 1 && c.hc_mult == 0,
                where, ": fields of another family are set on a ", kQwen3NextType, " config");
    // Checked before is_moe_layer() below, which divides by decoder_sparse_step.
    GLINT_CHECK(c.decoder_sparse_step > 0, where, ": decoder_sparse_step must be positive, got ",
                c.decoder_sparse_step);
    for (int64_t l : c.mlp_only_layers)
      GLINT_CHECK(l >= 0 && l < c.num_hidden_layers, where, ": mlp_only_layers entry ", l,
                  " is not a layer index in [0, ", c.num_hidden_layers, ")");
    bool any_moe = false, any_dense = false;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) (c.is_moe_layer(l) ? any_moe : any_dense) = true;
    if (any_dense)
      GLINT_CHECK(c.intermediate_size > 0, where, ": intermediate_size must be positive (the dense layers' width), got ",
                  c.intermediate_size);
    // transformers builds the shared expert and its gate in every MoE layer.
    if (any_moe)
      GLINT_CHECK(c.shared_expert_intermediate_size > 0, where,
                  ": shared_expert_intermediate_size must be positive, got ", c.shared_expert_intermediate_size);
  }

  LayerParts make_layer(const ModelConfig& c, int64_t layer, const TensorPlacement& p) const override {
    LayerParts parts;
    if (c.layer_types.at(layer) == cf::kFullAttention) {
      parts.attention = GatedAttention(c, p).ptr();
    } else {
      parts.attention_name = "linear_attn";
      parts.attention = GatedDeltaNet(c, p, DeltaNetProjections::kFused).ptr();
    }
    if (c.is_moe_layer(layer)) parts.mlp = MoeBlock(c, p).ptr();
    else parts.mlp = DenseMlp(c.hidden_size, c.intermediate_size, p).ptr();
    return parts;
  }

  std::vector<RotaryTables> rotary(const ModelConfig& c, const at::Tensor& position_ids,
                                   c10::ScalarType compute) const override {
    return {rotary_tables(position_ids, int64_t(double(c.head_dim) * c.partial_rotary_factor), c.rope_theta, compute)};
  }

  // Layer 0: Gated DeltaNet and MoE with the gated shared expert; layer 1: gated
  // attention and a dense MLP.
  ModelConfig tiny(int64_t vocab_size) const override {
    json j = {{"model_type", kQwen3NextType},
              {"vocab_size", vocab_size},
              {"hidden_size", 32},
              {"intermediate_size", 40},
              {"num_hidden_layers", 2},
              {"layer_types", {cf::kLinearAttention, cf::kFullAttention}},
              {"mlp_only_layers", {1}},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 8},
              {"rope_theta", 10000.0},
              {"partial_rotary_factor", 0.5},
              {"linear_num_key_heads", 2},
              {"linear_num_value_heads", 4},
              {"linear_key_head_dim", 8},
              {"linear_value_head_dim", 6},
              {"linear_conv_kernel_dim", 4},
              {"num_experts", 8},
              {"num_experts_per_tok", 2},
              {"moe_intermediate_size", 16},
              {"shared_expert_intermediate_size", 24},
              {"max_position_embeddings", 4096},
              {"initializer_range", 0.1}};
    return from_json(j, "qwen3_next tiny config");
  }

  std::vector<std::string> lora_targets() const override {
    return {"q_proj",    "k_proj",  "v_proj",    "o_proj",          "in_proj_qkvz",         "in_proj_ba",
            "out_proj",  "gate_proj", "up_proj", "down_proj",       "shared_expert_gate",   expert_target("gate_up_proj"),
            expert_target("down_proj")};
  }

  // Qwen3-Next releases: per-expert keys (Qwen/Qwen3-Next-80B-A3B-Instruct).
  const ExpertKeys& expert_keys() const override {
    static const SpelledExpertKeys keys(ExpertSpelling{
        "model.layers", "mlp", "experts", "gate_proj", "up_proj", "down_proj", "gate_up_proj", "down_proj"});
    return keys;
  }

  // Multi-token-prediction weights of the release are not part of the causal LM.
  std::string model_key(const std::string& stored, const ModelConfig& c) const override {
    return stored.rfind("mtp.", 0) == 0 ? "" : stored;
  }
};

}  // namespace

const ModelFamily& qwen3_next_family() {
  static const Qwen3NextFamily family;
  return family;
}

}  // namespace glint
