#include "model/glm4_moe/family.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/adaptable.h"
#include "model/config_fields.h"
#include "model/expert_keys.h"
#include "model/glm4_moe/attention.h"
#include "model/glm4_moe/config.h"
#include "model/moe.h"

namespace glint {

namespace {

using nlohmann::json;
namespace cf = config_fields;

constexpr const char* kGlm4MoeType = "glm4_moe";

class Glm4MoeFamily : public ModelFamily {
 public:
  std::string name() const override { return "glm4_moe"; }
  std::vector<std::string> model_types() const override { return {kGlm4MoeType}; }

  ModelConfig from_json(const json& j, const std::string& where) const override {
    ModelConfig c;
    cf::read(j, where, "model_type", &c.model_type, true);
    // transformers' Glm4MoeConfig defaults for what a config.json may leave out.
    c.intermediate_size = 10944;
    c.moe_intermediate_size = 1408;
    c.num_experts = 128;
    c.num_experts_per_tok = 8;
    c.n_shared_experts = 1;
    c.routed_scaling_factor = 1.0;
    c.n_group = 1;
    c.topk_group = 1;
    c.first_k_dense_replace = 1;
    c.norm_topk_prob = true;
    c.max_position_embeddings = 131072;
    c.rms_norm_eps = 1e-5;
    cf::read_common(j, where, &c);
    cf::read_head_dim(j, where, &c);
    cf::read_partial_rope(j, where, {"default"}, &c, /*default_factor=*/0.5);
    cf::read(j, where, "intermediate_size", &c.intermediate_size);
    cf::read(j, where, "moe_intermediate_size", &c.moe_intermediate_size);
    cf::read(j, where, "n_routed_experts", &c.num_experts);
    cf::read(j, where, "num_experts_per_tok", &c.num_experts_per_tok);
    cf::read(j, where, "n_shared_experts", &c.n_shared_experts);
    cf::read(j, where, "routed_scaling_factor", &c.routed_scaling_factor);
    cf::read(j, where, "n_group", &c.n_group);
    cf::read(j, where, "topk_group", &c.topk_group);
    cf::read(j, where, "first_k_dense_replace", &c.first_k_dense_replace);
    cf::read(j, where, "norm_topk_prob", &c.norm_topk_prob);
    cf::read(j, where, "use_qk_norm", &glm(c).use_qk_norm);
    cf::read(j, where, "num_nextn_predict_layers", &glm(c).num_nextn_predict_layers);
    auto quant = j.find("quantization_config");
    if (quant != j.end() && !quant->is_null()) cf::read_fp8_quantization(*quant, where + " (quantization_config)");
    c.scoring_func = "sigmoid";
    c.router_correction_bias = true;
    validate(c, where);
    return c;
  }

  json to_json(const ModelConfig& c) const override {
    json j = cf::common_json(c);
    j["architectures"] = {"Glm4MoeForCausalLM"};
    j["head_dim"] = c.head_dim;
    j["partial_rotary_factor"] = c.partial_rotary_factor;
    j["rope_scaling"] = nullptr;
    j["intermediate_size"] = c.intermediate_size;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["n_routed_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["n_shared_experts"] = c.n_shared_experts;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["first_k_dense_replace"] = c.first_k_dense_replace;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["use_qk_norm"] = glm(c).use_qk_norm;
    j["num_nextn_predict_layers"] = glm(c).num_nextn_predict_layers;
    return j;
  }

  void validate(const ModelConfig& c, const std::string& where) const override {
    GLINT_CHECK(c.model_type == kGlm4MoeType, where, ": model_type '", c.model_type, "' is not ", kGlm4MoeType);
    GLINT_CHECK(c.holds_fields<Glm4MoeFields>(), where, ": fields of another family are set on a ", kGlm4MoeType,
                " config");
    cf::validate_common(c, where);
    auto positive = [&](const char* name, int64_t v) {
      GLINT_CHECK(v > 0, where, ": ", name, " must be positive, got ", v);
    };
    positive("head_dim", c.head_dim);
    cf::validate_partial_rotary(c, where);
    GLINT_CHECK(c.rope_scaling.type.empty(), where, ": RoPE scaling is not supported for ", kGlm4MoeType);
    GLINT_CHECK(c.first_k_dense_replace >= 0, where, ": first_k_dense_replace must be >= 0, got ",
                c.first_k_dense_replace);
    if (c.first_k_dense_replace > 0) positive("intermediate_size", c.intermediate_size);
    positive("n_routed_experts", c.num_experts);
    GLINT_CHECK(c.n_shared_experts >= 0, where, ": n_shared_experts must be >= 0, got ", c.n_shared_experts);
    cf::validate_group_routing(c, where);
    GLINT_CHECK(glm(c).num_nextn_predict_layers >= 0, where, ": num_nextn_predict_layers must be >= 0, got ",
                glm(c).num_nextn_predict_layers);
    GLINT_CHECK(c.scoring_func == "sigmoid" && c.router_correction_bias && c.decoder_sparse_step == 1 &&
                    c.mlp_only_layers.empty() && c.moe_layer_freq == 1 && c.hc_mult == 0 &&
                    c.shared_expert_intermediate_size == 0 && c.swiglu_limit == 0 && c.layer_types.empty() &&
                    c.mlp_layer_types.empty() && !c.norm_unit_offset && c.sliding_window == 0 && !c.rope_interleave,
                where, ": fields of another family are set on a ", kGlm4MoeType, " config");
  }

  LayerParts make_layer(const ModelConfig& c, int64_t layer, const TensorPlacement& p) const override {
    LayerParts parts;
    parts.attention = Glm4MoeAttention(c, p).ptr();
    if (c.is_moe_layer(layer)) parts.mlp = MoeBlock(c, p).ptr();
    else parts.mlp = DenseMlp(c.hidden_size, c.intermediate_size, p).ptr();
    return parts;
  }

  std::vector<RotaryTables> rotary(const ModelConfig& c, const at::Tensor& position_ids,
                                   c10::ScalarType compute) const override {
    return {rotary_tables(position_ids, int64_t(double(c.head_dim) * c.partial_rotary_factor), c.rope_theta, compute)};
  }

  ModelConfig tiny(int64_t vocab_size) const override {
    json j = {{"model_type", kGlm4MoeType},
              {"vocab_size", vocab_size},
              {"hidden_size", 64},
              {"intermediate_size", 96},
              {"moe_intermediate_size", 24},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 16},
              {"partial_rotary_factor", 0.5},
              {"attention_bias", true},
              {"use_qk_norm", true},
              {"n_routed_experts", 8},
              {"num_experts_per_tok", 2},
              {"n_shared_experts", 1},
              {"n_group", 2},
              {"topk_group", 1},
              {"routed_scaling_factor", 2.5},
              {"first_k_dense_replace", 1},
              {"rope_theta", 1000000.0},
              {"max_position_embeddings", 4096},
              {"initializer_range", 0.1}};
    return from_json(j, "glm4_moe tiny config");
  }

  std::vector<std::string> lora_targets() const override {
    return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
            expert_target("gate_up_proj"), expert_target("down_proj")};
  }

  // The releases' multi-token-prediction layers (model.layers.N.* for N >= num_hidden_layers:
  // their embedding and head projections, norms and a decoder layer) are not the decoder's.
  std::string model_key(const std::string& stored, const ModelConfig& c) const override {
    return beyond_last_layer(stored, "model.layers.", c.num_hidden_layers) ? "" : stored;
  }

  // GLM-4.5/4.6 releases: per-expert keys (zai-org/GLM-4.5-Air).
  const ExpertKeys& expert_keys() const override {
    static const SpelledExpertKeys keys(ExpertSpelling{
        "model.layers", "mlp", "experts", "gate_proj", "up_proj", "down_proj", "gate_up_proj", "down_proj"});
    return keys;
  }
};

}  // namespace

const ModelFamily& glm4_moe_family() {
  static const Glm4MoeFamily family;
  return family;
}

}  // namespace glint
