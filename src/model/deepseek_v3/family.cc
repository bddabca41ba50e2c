#include "model/deepseek_v3/family.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config_fields.h"
#include "model/adaptable.h"
#include "model/expert_keys.h"
#include "model/deepseek_v3/attention.h"
#include "model/moe.h"
#include "model/deepseek_v3/config.h"

namespace glint {

namespace {

using nlohmann::json;
namespace cf = config_fields;

class DeepseekV3Family : public ModelFamily {
 public:
  std::string name() const override { return "deepseek_v3"; }
  std::vector<std::string> model_types() const override { return {"deepseek_v3", "kimi_k2"}; }

  ModelConfig from_json(const json& j, const std::string& where) const override {
    ModelConfig c;
    cf::read(j, where, "model_type", &c.model_type, true);
    // transformers' DeepseekV3Config defaults for what a config.json may leave out.
    c.intermediate_size = 18432;
    c.moe_intermediate_size = 2048;
    c.num_experts = 256;
    c.num_experts_per_tok = 8;
    c.n_shared_experts = 1;
    c.routed_scaling_factor = 2.5;
    mla(c).kv_lora_rank = 512;
    mla(c).q_lora_rank = 1536;
    mla(c).qk_rope_head_dim = 64;
    mla(c).qk_nope_head_dim = 128;
    mla(c).v_head_dim = 128;
    c.n_group = 8;
    c.topk_group = 4;
    c.first_k_dense_replace = 3;
    c.norm_topk_prob = true;
    c.max_position_embeddings = 4096;
    c.rope_interleave = true;
    cf::read_common(j, where, &c);
    cf::read_rope_scaling(j, where, /*yarn_allowed=*/true, &c);
    cf::read(j, where, "intermediate_size", &c.intermediate_size);
    cf::read(j, where, "moe_intermediate_size", &c.moe_intermediate_size);
    cf::read(j, where, "n_routed_experts", &c.num_experts);
    cf::read(j, where, "num_experts_per_tok", &c.num_experts_per_tok);
    cf::read(j, where, "n_shared_experts", &c.n_shared_experts);
    cf::read(j, where, "routed_scaling_factor", &c.routed_scaling_factor);
    cf::read(j, where, "kv_lora_rank", &mla(c).kv_lora_rank);
    auto q = j.find("q_lora_rank");
    if (q != j.end() && q->is_null()) mla(c).q_lora_rank = 0;  // null: a plain q_proj
    else cf::read(j, where, "q_lora_rank", &mla(c).q_lora_rank);
    cf::read(j, where, "qk_rope_head_dim", &mla(c).qk_rope_head_dim);
    cf::read(j, where, "qk_nope_head_dim", &mla(c).qk_nope_head_dim);
    cf::read(j, where, "v_head_dim", &mla(c).v_head_dim);
    cf::read(j, where, "n_group", &c.n_group);
    cf::read(j, where, "topk_group", &c.topk_group);
    cf::read(j, where, "first_k_dense_replace", &c.first_k_dense_replace);
    cf::read(j, where, "norm_topk_prob", &c.norm_topk_prob);
    cf::read(j, where, "rope_interleave", &c.rope_interleave);
    std::string scoring = "sigmoid";
    cf::read(j, where, "scoring_func", &scoring);
    GLINT_CHECK(scoring == "sigmoid", where, ": scoring_func '", scoring, "' is not supported (expected sigmoid)");
    auto quant = j.find("quantization_config");
    if (quant != j.end() && !quant->is_null()) cf::read_fp8_quantization(*quant, where + " (quantization_config)");
    c.head_dim = mla(c).qk_rope_head_dim;  // as transformers sets it: the RoPE width
    c.scoring_func = "sigmoid";
    c.router_correction_bias = true;
    validate(c, where);
    return c;
  }

  json to_json(const ModelConfig& c) const override {
    json j = cf::common_json(c);
    j["architectures"] = {"DeepseekV3ForCausalLM"};
    j["intermediate_size"] = c.intermediate_size;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["n_routed_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["n_shared_experts"] = c.n_shared_experts;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["kv_lora_rank"] = mla(c).kv_lora_rank;
    j["q_lora_rank"] = mla(c).q_lora_rank > 0 ? json(mla(c).q_lora_rank) : json(nullptr);
    j["qk_rope_head_dim"] = mla(c).qk_rope_head_dim;
    j["qk_nope_head_dim"] = mla(c).qk_nope_head_dim;
    j["v_head_dim"] = mla(c).v_head_dim;
    j["head_dim"] = mla(c).qk_rope_head_dim;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["first_k_dense_replace"] = c.first_k_dense_replace;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["rope_interleave"] = c.rope_interleave;
    j["scoring_func"] = "sigmoid";
    j["topk_method"] = "noaux_tc";
    j["rope_scaling"] = cf::rope_scaling_json(c.rope_scaling);
    return j;
  }

  void validate(const ModelConfig& c, const std::string& where) const override {
    GLINT_CHECK(c.model_type == "deepseek_v3" || c.model_type == "kimi_k2", where, ": model_type '", c.model_type,
                "' is not a deepseek_v3 family type");
    cf::validate_common(c, where);
    auto positive = [&](const char* name, int64_t v) {
      GLINT_CHECK(v > 0, where, ": ", name, " must be positive, got ", v);
    };
    positive("kv_lora_rank", mla(c).kv_lora_rank);
    positive("qk_rope_head_dim", mla(c).qk_rope_head_dim);
    positive("qk_nope_head_dim", mla(c).qk_nope_head_dim);
    positive("v_head_dim", mla(c).v_head_dim);
    GLINT_CHECK(mla(c).q_lora_rank >= 0, where, ": q_lora_rank must be positive or null, got ", mla(c).q_lora_rank);
    GLINT_CHECK(mla(c).qk_rope_head_dim % 2 == 0, where, ": qk_rope_head_dim must be even for RoPE, got ",
                mla(c).qk_rope_head_dim);
    GLINT_CHECK(c.first_k_dense_replace >= 0, where, ": first_k_dense_replace must be >= 0, got ",
                c.first_k_dense_replace);
    if (c.first_k_dense_replace > 0 || c.num_experts == 0) positive("intermediate_size", c.intermediate_size);
    GLINT_CHECK(c.num_experts > 0, where, ": n_routed_experts must be positive, got ", c.num_experts);
    GLINT_CHECK(c.n_shared_experts >= 0, where, ": n_shared_experts must be >= 0, got ", c.n_shared_experts);
    cf::validate_group_routing(c, where);
  }

  LayerParts make_layer(const ModelConfig& c, int64_t layer, const TensorPlacement& p) const override {
    LayerParts parts;
    parts.attention = MlaAttention(c, p).ptr();
    if (c.is_moe_layer(layer)) parts.mlp = MoeBlock(c, p).ptr();
    else parts.mlp = DenseMlp(c.hidden_size, c.intermediate_size, p).ptr();
    return parts;
  }

  std::vector<RotaryTables> rotary(const ModelConfig& c, const at::Tensor& position_ids,
                                   c10::ScalarType compute) const override {
    return {rotary_tables(position_ids, rope_inv_freq(mla(c).qk_rope_head_dim, c.rope_theta, c.rope_scaling),
                          rope_attention_factor(c.rope_scaling), compute)};
  }

  ModelConfig tiny(int64_t vocab_size) const override {
    json j = {{"model_type", "deepseek_v3"},
              {"vocab_size", vocab_size},
              {"hidden_size", 64},
              {"intermediate_size", 96},
              {"moe_intermediate_size", 24},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 4},
              {"n_routed_experts", 8},
              {"num_experts_per_tok", 2},
              {"n_shared_experts", 1},
              {"n_group", 4},
              {"topk_group", 2},
              {"routed_scaling_factor", 2.5},
              {"first_k_dense_replace", 1},
              {"q_lora_rank", 32},
              {"kv_lora_rank", 16},
              {"qk_nope_head_dim", 16},
              {"qk_rope_head_dim", 8},
              {"v_head_dim", 12},
              {"max_position_embeddings", 4096},
              {"initializer_range", 0.1},
              {"rope_scaling",
               {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1024},
                {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 0.707}}}};
    return from_json(j, "deepseek_v3 tiny config");
  }

  std::vector<std::string> lora_targets() const override {
    return {"q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj",
            "gate_proj", "up_proj", "down_proj", expert_target("gate_up_proj"), expert_target("down_proj")};
  }

  // The release's multi-token-prediction layer (model.layers.61.* with 61 layers) is not the
  // decoder's.
  std::string model_key(const std::string& stored, const ModelConfig& c) const override {
    return beyond_last_layer(stored, "model.layers.", c.num_hidden_layers) ? "" : stored;
  }

  // DeepSeek-V3 releases: per-expert keys (deepseek-ai/DeepSeek-V3).
  const ExpertKeys& expert_keys() const override {
    static const SpelledExpertKeys keys(ExpertSpelling{
        "model.layers", "mlp", "experts", "gate_proj", "up_proj", "down_proj", "gate_up_proj", "down_proj"});
    return keys;
  }
};

}  // namespace

const ModelFamily& deepseek_v3_family() {
  static const DeepseekV3Family family;
  return family;
}

}  // namespace glint
