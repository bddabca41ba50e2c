#include "model/gpt_oss/family.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/adaptable.h"
#include "model/config_fields.h"
#include "model/expert_keys.h"
#include "model/gpt_oss/attention.h"
#include "model/gpt_oss/config.h"
#include "model/moe.h"

namespace glint {

namespace {

using nlohmann::json;
namespace cf = config_fields;

constexpr const char* kGptOssType = "gpt_oss";

class GptOssFamily : public ModelFamily {
 public:
  std::string name() const override { return "gpt_oss"; }
  std::vector<std::string> model_types() const override { return {kGptOssType}; }

  ModelConfig from_json(const json& j, const std::string& where) const override {
    ModelConfig c;
    cf::read(j, where, "model_type", &c.model_type, true);
    // transformers' GptOssConfig defaults for what a config.json may leave out.
    c.num_experts = 128;
    c.num_experts_per_tok = 4;
    c.head_dim = 64;
    c.sliding_window = 128;
    c.rope_theta = 150000.0;
    c.rms_norm_eps = 1e-5;
    c.max_position_embeddings = 131072;
    c.router_aux_loss_coef = 0.9;
    c.attention_bias = true;
    c.swiglu_limit = 7.0;
    c.norm_topk_prob = true;
    cf::read_common(j, where, &c);
    cf::read_head_dim(j, where, &c);
    cf::read_rope_scaling(j, where, /*yarn_allowed=*/true, &c);
    // The experts are intermediate_size wide; there is no dense MLP.
    cf::read(j, where, "intermediate_size", &c.moe_intermediate_size, true);
    cf::read(j, where, "num_local_experts", &c.num_experts);
    if (!cf::read(j, where, "num_experts_per_tok", &c.num_experts_per_tok))
      cf::read(j, where, "experts_per_token", &c.num_experts_per_tok);
    cf::read(j, where, "output_router_logits", &c.output_router_logits);
    cf::read(j, where, "router_aux_loss_coef", &c.router_aux_loss_coef);
    cf::read(j, where, "swiglu_limit", &c.swiglu_limit);
    // sliding_window: null means none (every layer then sees its whole prefix).
    if (auto sw = j.find("sliding_window"); sw != j.end() && sw->is_null()) c.sliding_window = 0;
    else cf::read(j, where, "sliding_window", &c.sliding_window);
    auto types = j.find("layer_types");
    if (types != j.end() && !types->is_null()) {
      GLINT_CHECK(types->is_array(), where, ": field 'layer_types' must be an array, got ", types->dump());
      for (const auto& t : *types) {
        GLINT_CHECK(t.is_string(), where, ": field 'layer_types' must hold strings, got ", t.dump());
        c.layer_types.push_back(t.get<std::string>());
      }
    } else {
      for (int64_t l = 0; l < c.num_hidden_layers; ++l)  // transformers' default: sliding first
        c.layer_types.push_back((l + 1) % 2 ? kGptOssSliding : kGptOssFull);
    }
    auto quant = j.find("quantization_config");
    if (quant != j.end() && !quant->is_null()) {
      const std::string w = where + " (quantization_config)";
      GLINT_CHECK(quant->is_object(), w, ": must be an object, got ", quant->dump());
      std::string method;
      cf::read(*quant, w, "quant_method", &method, true);
      GLINT_CHECK(method == "mxfp4", w, ": quant_method '", method, "' is not supported for ", kGptOssType,
                  " (its releases' mxfp4 experts are; dequantise other forms first)");
    }
    validate(c, where);
    return c;
  }

  json to_json(const ModelConfig& c) const override {
    json j = cf::common_json(c);
    j["architectures"] = {"GptOssForCausalLM"};
    j["head_dim"] = c.head_dim;
    j["rope_scaling"] = cf::rope_scaling_json(c.rope_scaling);
    j["intermediate_size"] = c.moe_intermediate_size;
    j["num_local_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["experts_per_token"] = c.num_experts_per_tok;
    j["output_router_logits"] = c.output_router_logits;
    j["router_aux_loss_coef"] = c.router_aux_loss_coef;
    j["swiglu_limit"] = c.swiglu_limit;
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
    j["layer_types"] = c.layer_types;
    return j;
  }

  void validate(const ModelConfig& c, const std::string& where) const override {
    GLINT_CHECK(c.model_type == kGptOssType, where, ": model_type '", c.model_type, "' is not ", kGptOssType);
    cf::validate_common(c, where);
    GLINT_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, where, ": head_dim must be positive and even, got ",
                c.head_dim);
    GLINT_CHECK(c.moe_intermediate_size > 0, where, ": intermediate_size must be positive, got ",
                c.moe_intermediate_size);
    GLINT_CHECK(c.num_experts > 0, where, ": num_local_experts must be positive, got ", c.num_experts);
    GLINT_CHECK(c.num_experts_per_tok > 0 && c.num_experts_per_tok <= c.num_experts, where,
                ": num_experts_per_tok must be in [1, num_local_experts = ", c.num_experts, "], got ",
                c.num_experts_per_tok);
    GLINT_CHECK(c.swiglu_limit > 0, where, ": swiglu_limit must be positive, got ", c.swiglu_limit);
    GLINT_CHECK(c.sliding_window >= 0, where, ": sliding_window must be >= 0, got ", c.sliding_window);
    GLINT_CHECK(c.rope_scaling.type.empty() || c.rope_scaling.type == "yarn", where, ": RoPE scaling '",
                c.rope_scaling.type, "' is not supported for ", kGptOssType);
    GLINT_CHECK(int64_t(c.layer_types.size()) == c.num_hidden_layers, where, ": layer_types has ",
                c.layer_types.size(), " entries for ", c.num_hidden_layers, " layers");
    for (size_t l = 0; l < c.layer_types.size(); ++l) {
      const std::string& t = c.layer_types[l];
      GLINT_CHECK(t == kGptOssSliding || t == kGptOssFull, where, ": layer_types[", l, "] is '", t, "'; ",
                  kGptOssType, " layers are '", kGptOssSliding, "' or '", kGptOssFull, "'");
      GLINT_CHECK(t == kGptOssFull || c.sliding_window > 0, where, ": layer ", l,
                  " is a sliding_attention layer but sliding_window is not set");
    }
    GLINT_CHECK(!c.family_fields.get() && c.scoring_func == "softmax" && !c.router_correction_bias && c.n_group == 1 &&
                    c.n_shared_experts == 0 && c.first_k_dense_replace == 0 && c.moe_layer_freq == 1 &&
                    c.decoder_sparse_step == 1 && c.mlp_only_layers.empty() && c.hc_mult == 0 &&
                    c.shared_expert_intermediate_size == 0 && c.mlp_layer_types.empty() && !c.norm_unit_offset &&
                    c.partial_rotary_factor == 1.0 && !c.rope_interleave && c.norm_topk_prob &&
                    c.routed_scaling_factor == 1.0,
                where, ": fields of another family are set on a ", kGptOssType, " config");
  }

  LayerParts make_layer(const ModelConfig& c, int64_t layer, const TensorPlacement& p) const override {
    LayerParts parts;
    parts.attention = GptOssAttention(c, layer, p).ptr();
    MoeForm form;
    form.router_name = "router";
    form.router_bias = true;
    form.experts.in_major = true;
    form.experts.interleaved = true;
    form.experts.biases = true;
    form.experts.glu = Glu{c.swiglu_limit, kGptOssGluAlpha, kGptOssGluUpOffset};
    parts.mlp = MoeBlock(c, p, form).ptr();
    return parts;
  }

  std::vector<RotaryTables> rotary(const ModelConfig& c, const at::Tensor& position_ids,
                                   c10::ScalarType compute) const override {
    return {rotary_tables(position_ids, rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling),
                          rope_attention_factor(c.rope_scaling), compute)};
  }

  ModelConfig tiny(int64_t vocab_size) const override {
    json j = {{"model_type", kGptOssType},
              {"vocab_size", vocab_size},
              {"hidden_size", 64},
              {"intermediate_size", 32},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 16},
              {"num_local_experts", 8},
              {"num_experts_per_tok", 2},
              {"sliding_window", 4},
              {"swiglu_limit", 7.0},
              {"rope_theta", 150000.0},
              {"rope_scaling",
               {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0}, {"truncate", false},
                {"original_max_position_embeddings", 64}}},
              {"max_position_embeddings", 256},
              {"initializer_range", 0.1}};
    return from_json(j, "gpt_oss tiny config");
  }

  std::vector<std::string> lora_targets() const override {
    return {"q_proj", "k_proj", "v_proj", "o_proj", expert_target("gate_up_proj"), expert_target("down_proj")};
  }

  // transformers' names (and the releases', whose experts add MXFP4 "_blocks"/"_scales").
  const ExpertKeys& expert_keys() const override {
    static const SpelledExpertKeys keys(ExpertSpelling{
        "model.layers", "mlp", "experts", "gate_proj", "up_proj", "down_proj", "gate_up_proj", "down_proj"});
    return keys;
  }
  bool saves_packed_experts() const override { return true; }
};

}  // namespace

const ModelFamily& gpt_oss_family() {
  static const GptOssFamily family;
  return family;
}

}  // namespace glint
