#include "model/qwen3_5/family.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config_fields.h"
#include "model/adaptable.h"
#include "model/expert_keys.h"
#include "model/moe.h"
#include "model/qwen3_5/attention.h"
#include "model/qwen3_5/config.h"

namespace glint {

namespace {

using nlohmann::json;
namespace cf = config_fields;

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

class Qwen3_5Family : public ModelFamily {
 public:
  std::string name() const override { return "qwen3_5"; }
  std::vector<std::string> model_types() const override { return {"qwen3_5_moe", "qwen3_5_moe_text"}; }

  ModelConfig from_json(const json& top, const std::string& where) const override {
    ModelConfig c;
    cf::read(top, where, "model_type", &c.model_type, true);
    // The multimodal release keeps the text model's fields under text_config.
    const bool nested = c.model_type == "qwen3_5_moe";
    if (nested) GLINT_CHECK(top.contains("text_config") && top["text_config"].is_object(), where,
                            ": a qwen3_5_moe config needs a text_config object");
    const json& j = nested ? top["text_config"] : top;
    const std::string w = nested ? where + " (text_config)" : where;
    c.head_dim = 256;
    c.num_key_value_heads = 2;
    delta_net(c).linear_num_key_heads = 16;
    delta_net(c).linear_num_value_heads = 32;
    delta_net(c).linear_key_head_dim = 128;
    delta_net(c).linear_value_head_dim = 128;
    delta_net(c).linear_conv_kernel_dim = 4;
    c.moe_intermediate_size = 512;
    c.shared_expert_intermediate_size = 512;
    c.num_experts = 256;
    c.num_experts_per_tok = 8;
    cf::read_common(j, w, &c);
    c.num_key_value_heads = j.contains("num_key_value_heads") ? c.num_key_value_heads : 2;
    cf::read(j, w, "head_dim", &c.head_dim);
    if (!cf::read(top, where, "tie_word_embeddings", &c.tie_word_embeddings)) c.tie_word_embeddings = false;
    // M-RoPE gives every section the same position for text: plain RoPE here.
    cf::read_partial_rope(j, w, {"default", "mrope"}, &c);
    cf::read(j, w, "linear_num_key_heads", &delta_net(c).linear_num_key_heads);
    cf::read(j, w, "linear_num_value_heads", &delta_net(c).linear_num_value_heads);
    cf::read(j, w, "linear_key_head_dim", &delta_net(c).linear_key_head_dim);
    cf::read(j, w, "linear_value_head_dim", &delta_net(c).linear_value_head_dim);
    cf::read(j, w, "linear_conv_kernel_dim", &delta_net(c).linear_conv_kernel_dim);
    cf::read(j, w, "num_experts", &c.num_experts);
    cf::read(j, w, "num_experts_per_tok", &c.num_experts_per_tok);
    cf::read(j, w, "moe_intermediate_size", &c.moe_intermediate_size);
    cf::read(j, w, "shared_expert_intermediate_size", &c.shared_expert_intermediate_size);
    cf::read(j, w, "output_router_logits", &c.output_router_logits);
    cf::read(j, w, "router_aux_loss_coef", &c.router_aux_loss_coef);
    cf::read_hybrid_layer_types(j, w, &c);
    c.norm_topk_prob = true;  // this router always renormalises
    c.norm_unit_offset = true;
    c.model_type = "qwen3_5_moe_text";  // what this family builds and saves: the text model
    validate(c, where);
    return c;
  }

  json to_json(const ModelConfig& c) const override {
    json j = cf::common_json(c);
    j["model_type"] = "qwen3_5_moe_text";
    j["architectures"] = {"Qwen3_5MoeForCausalLM"};
    j["head_dim"] = c.head_dim;
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta},
                            {"partial_rotary_factor", c.partial_rotary_factor}};
    j.erase("rope_theta");
    cf::hybrid_json(c, &j);
    return j;
  }

  void validate(const ModelConfig& c, const std::string& where) const override {
    GLINT_CHECK(c.model_type == "qwen3_5_moe_text" || c.model_type == "qwen3_5_moe", where, ": model_type '",
                c.model_type, "' is not a qwen3_5 family type");
    cf::validate_common(c, where);
    GLINT_CHECK(c.num_experts > 0, where, ": num_experts must be positive, got ", c.num_experts);
    GLINT_CHECK(c.shared_expert_intermediate_size >= 0, where, ": shared_expert_intermediate_size must be >= 0, got ",
                c.shared_expert_intermediate_size);
    cf::validate_hybrid_layers(c, where);
  }

  LayerParts make_layer(const ModelConfig& c, int64_t layer, const TensorPlacement& p) const override {
    LayerParts parts;
    if (c.layer_types.at(layer) == cf::kFullAttention) {
      parts.attention = GatedAttention(c, p).ptr();
    } else {
      parts.attention_name = "linear_attn";
      parts.attention = GatedDeltaNet(c, p, DeltaNetProjections::kSplit).ptr();
    }
    parts.mlp = MoeBlock(c, p).ptr();
    return parts;
  }

  std::vector<RotaryTables> rotary(const ModelConfig& c, const at::Tensor& position_ids,
                                   c10::ScalarType compute) const override {
    return {rotary_tables(position_ids, int64_t(double(c.head_dim) * c.partial_rotary_factor), c.rope_theta, compute)};
  }

  ModelConfig tiny(int64_t vocab_size) const override {
    json j = {{"model_type", "qwen3_5_moe_text"},
              {"vocab_size", vocab_size},
              {"hidden_size", 32},
              {"num_hidden_layers", 2},
              {"layer_types", {cf::kLinearAttention, cf::kFullAttention}},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 8},
              {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}}},
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
    return from_json(j, "qwen3_5 tiny config");
  }

  std::vector<std::string> lora_targets() const override {
    return {"q_proj",   "k_proj",  "v_proj",    "o_proj",    "in_proj_qkv", "in_proj_z",          "in_proj_b",
            "in_proj_a", "out_proj", "gate_proj", "up_proj", "down_proj",   "shared_expert_gate", expert_target("gate_up_proj"),
            expert_target("down_proj")};
  }

  // Qwen3.5-MoE releases: packed keys on disk (Qwen/Qwen3.5-35B-A3B, under "model.language_model.", which model_key drops).
  const ExpertKeys& expert_keys() const override {
    static const SpelledExpertKeys keys(ExpertSpelling{
        "model.layers", "mlp", "experts", "gate_proj", "up_proj", "down_proj", "gate_up_proj", "down_proj"});
    return keys;
  }

  bool saves_packed_experts() const override { return true; }

  std::string model_key(const std::string& stored, const ModelConfig& c) const override {
    if (starts_with(stored, "model.visual.") || starts_with(stored, "mtp.")) return "";
    const std::string release = "model.language_model.";
    if (starts_with(stored, release)) return "model." + stored.substr(release.size());
    return stored;
  }
};

}  // namespace

const ModelFamily& qwen3_5_family() {
  static const Qwen3_5Family family;
  return family;
}

}  // namespace glint
