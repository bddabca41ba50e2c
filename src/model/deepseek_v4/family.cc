#include "model/deepseek_v4/family.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "model/config_fields.h"
#include "model/adaptable.h"
#include "model/expert_keys.h"
#include "model/deepseek_v4/attention.h"
#include "model/moe.h"
#include "model/deepseek_v4/config.h"

namespace glint {

namespace {

using nlohmann::json;
namespace cf = config_fields;

constexpr const char* kHashMoe = "hash_moe";
constexpr const char* kMoe = "moe";

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// The released checkpoint's module names inside a layer, and transformers' for them
// (conversion_mapping.py's deepseek_v4 entry), longest first where one is a prefix of another.
const std::vector<std::pair<std::string, std::string>>& layer_renames() {
  static const std::vector<std::pair<std::string, std::string>> renames = {
      {"attn_norm.", "input_layernorm."},
      {"ffn_norm.", "post_attention_layernorm."},
      {"hc_attn_fn", "attn_hc.fn"},
      {"hc_attn_base", "attn_hc.base"},
      {"hc_attn_scale", "attn_hc.scale"},
      {"hc_ffn_fn", "ffn_hc.fn"},
      {"hc_ffn_base", "ffn_hc.base"},
      {"hc_ffn_scale", "ffn_hc.scale"},
      {"attn.attn_sink", "self_attn.sinks"},
      {"attn.indexer.compressor.wkv.", "self_attn.compressor.indexer.kv_proj."},
      {"attn.indexer.compressor.wgate.", "self_attn.compressor.indexer.gate_proj."},
      {"attn.indexer.compressor.norm.", "self_attn.compressor.indexer.kv_norm."},
      {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"},
      {"attn.indexer.wq_b.", "self_attn.compressor.indexer.q_b_proj."},
      {"attn.indexer.weights_proj.", "self_attn.compressor.indexer.scorer.weights_proj."},
      {"attn.compressor.wkv.", "self_attn.compressor.kv_proj."},
      {"attn.compressor.wgate.", "self_attn.compressor.gate_proj."},
      {"attn.compressor.norm.", "self_attn.compressor.kv_norm."},
      {"attn.compressor.ape", "self_attn.compressor.position_bias"},
      {"attn.wq_a.", "self_attn.q_a_proj."},
      {"attn.q_norm.", "self_attn.q_a_norm."},
      {"attn.wq_b.", "self_attn.q_b_proj."},
      {"attn.wkv.", "self_attn.kv_proj."},
      {"attn.kv_norm.", "self_attn.kv_norm."},
      {"attn.wo_a.", "self_attn.o_a_proj."},
      {"attn.wo_b.", "self_attn.o_b_proj."},
      {"ffn.gate.weight", "mlp.gate.weight"},
      {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"},
      {"ffn.gate.tid2eid", "mlp.gate.tid2eid"},
      {"ffn.shared_experts.w1.", "mlp.shared_experts.gate_proj."},
      {"ffn.shared_experts.w2.", "mlp.shared_experts.down_proj."},
      {"ffn.shared_experts.w3.", "mlp.shared_experts.up_proj."},
  };
  return renames;
}

// One rope sub-dict of the nested v5 form ({"main": {...}, "compress": {...}}).
struct RopeSet {
  double theta = 0;
  double partial_rotary_factor = -1;  // < 0: absent
};

class DeepseekV4Family : public ModelFamily {
 public:
  std::string name() const override { return "deepseek_v4"; }
  std::vector<std::string> model_types() const override { return {"deepseek_v4"}; }

  ModelConfig from_json(const json& j, const std::string& where) const override {
    ModelConfig c;
    cf::read(j, where, "model_type", &c.model_type, true);
    // transformers' DeepseekV4Config defaults (the released Flash values) for what a
    // config.json may leave out.
    c.head_dim = 512;
    v4(c).q_lora_rank = 1024;
    v4(c).o_groups = 8;
    v4(c).o_lora_rank = 1024;
    c.num_experts = 256;
    c.num_experts_per_tok = 6;
    c.moe_intermediate_size = 2048;
    c.routed_scaling_factor = 1.5;
    v4(c).index_n_heads = 64;
    v4(c).index_head_dim = 128;
    v4(c).index_topk = 512;
    c.hc_mult = 4;
    c.sliding_window = 128;
    c.swiglu_limit = 10.0;
    c.max_position_embeddings = 1048576;
    v4(c).compress_rope_theta = 160000.0;
    cf::read_common(j, where, &c);
    cf::read(j, where, "head_dim", &c.head_dim);
    cf::read(j, where, "q_lora_rank", &v4(c).q_lora_rank);
    cf::read(j, where, "o_groups", &v4(c).o_groups);
    cf::read(j, where, "o_lora_rank", &v4(c).o_lora_rank);
    cf::read(j, where, "n_routed_experts", &c.num_experts);
    cf::read(j, where, "num_experts_per_tok", &c.num_experts_per_tok);
    cf::read(j, where, "moe_intermediate_size", &c.moe_intermediate_size);
    cf::read(j, where, "routed_scaling_factor", &c.routed_scaling_factor);
    cf::read(j, where, "index_n_heads", &v4(c).index_n_heads);
    cf::read(j, where, "index_head_dim", &v4(c).index_head_dim);
    cf::read(j, where, "index_topk", &v4(c).index_topk);
    cf::read(j, where, "hc_mult", &c.hc_mult);
    cf::read(j, where, "hc_sinkhorn_iters", &c.hc_sinkhorn_iters);
    cf::read(j, where, "hc_eps", &c.hc_eps);
    cf::read(j, where, "swiglu_limit", &c.swiglu_limit);
    cf::read(j, where, "compress_rope_theta", &v4(c).compress_rope_theta);
    // sliding_window: null or <= 0 means no window.
    if (auto sw = j.find("sliding_window"); sw != j.end()) {
      if (sw->is_null()) c.sliding_window = 0;
      else cf::read(j, where, "sliding_window", &c.sliding_window);
      c.sliding_window = std::max<int64_t>(c.sliding_window, 0);
    }
    c.scoring_func = "sqrtsoftplus";
    cf::read(j, where, "scoring_func", &c.scoring_func);
    GLINT_CHECK(c.scoring_func == "sqrtsoftplus" || c.scoring_func == "sigmoid", where, ": scoring_func '",
                c.scoring_func, "' is not supported (expected sqrtsoftplus or sigmoid)");
    c.norm_topk_prob = true;  // DeepSeek-V4 always renormalises (norm_topk_prob is not read)
    c.n_shared_experts = 1;   // one shared expert of moe_intermediate_size (n_shared_experts is not read)
    c.router_correction_bias = true;
    read_layer_types(j, where, &c);
    read_rope(j, where, &c);
    v4(c).qk_rope_head_dim = rope_dims(c);  // the attention's rotary width
    auto quant = j.find("quantization_config");
    if (quant != j.end() && !quant->is_null()) cf::read_fp8_quantization(*quant, where + " (quantization_config)");
    validate(c, where);
    return c;
  }

  json to_json(const ModelConfig& c) const override {
    json j = cf::common_json(c);
    j["architectures"] = {"DeepseekV4ForCausalLM"};
    j["head_dim"] = c.head_dim;
    j["q_lora_rank"] = v4(c).q_lora_rank;
    j["o_groups"] = v4(c).o_groups;
    j["o_lora_rank"] = v4(c).o_lora_rank;
    j["n_routed_experts"] = c.num_experts;
    j["n_shared_experts"] = 1;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["scoring_func"] = c.scoring_func;
    j["topk_method"] = "noaux_tc";
    j["norm_topk_prob"] = true;
    j["index_n_heads"] = v4(c).index_n_heads;
    j["index_head_dim"] = v4(c).index_head_dim;
    j["index_topk"] = v4(c).index_topk;
    j["hc_mult"] = c.hc_mult;
    j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
    j["hc_eps"] = c.hc_eps;
    j["swiglu_limit"] = c.swiglu_limit;
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
    j["layer_types"] = c.layer_types;
    j["mlp_layer_types"] = c.mlp_layer_types;
    j["compress_rates"] = {{kDeepseekV4Csa, v4(c).compress_rate_csa}, {kDeepseekV4Hca, v4(c).compress_rate_hca}};
    j["partial_rotary_factor"] = c.partial_rotary_factor;
    j["qk_rope_head_dim"] = rope_dims(c);
    j["compress_rope_theta"] = v4(c).compress_rope_theta;
    j["rope_scaling"] = cf::rope_scaling_json(c.rope_scaling);
    return j;
  }

  void validate(const ModelConfig& c, const std::string& where) const override {
    GLINT_CHECK(c.model_type == "deepseek_v4", where, ": model_type '", c.model_type,
                "' is not a deepseek_v4 family type");
    cf::validate_common(c, where);
    auto positive = [&](const char* name, int64_t v) {
      GLINT_CHECK(v > 0, where, ": ", name, " must be positive, got ", v);
    };
    positive("head_dim", c.head_dim);
    positive("q_lora_rank", v4(c).q_lora_rank);
    positive("o_groups", v4(c).o_groups);
    positive("o_lora_rank", v4(c).o_lora_rank);
    positive("hc_mult", c.hc_mult);
    positive("hc_sinkhorn_iters", c.hc_sinkhorn_iters);
    positive("n_routed_experts", c.num_experts);
    GLINT_CHECK(c.hc_eps >= 0, where, ": hc_eps must be >= 0, got ", c.hc_eps);
    GLINT_CHECK(c.swiglu_limit >= 0, where, ": swiglu_limit must be >= 0, got ", c.swiglu_limit);
    GLINT_CHECK(c.num_attention_heads % v4(c).o_groups == 0, where, ": o_groups (", v4(c).o_groups,
                ") must divide num_attention_heads (", c.num_attention_heads, ")");
    GLINT_CHECK(c.routed_scaling_factor > 0, where, ": routed_scaling_factor must be positive, got ",
                c.routed_scaling_factor);
    const int64_t rd = rope_dims(c);
    GLINT_CHECK(rd > 0 && rd % 2 == 0 && rd <= c.head_dim, where, ": partial_rotary_factor ",
                c.partial_rotary_factor, " gives ", rd, " RoPE dims of head_dim ", c.head_dim,
                " (need an even number in [2, head_dim])");
    GLINT_CHECK(v4(c).compress_rope_theta > 0, where, ": compress_rope_theta must be positive, got ",
                v4(c).compress_rope_theta);
    GLINT_CHECK(int64_t(c.layer_types.size()) == c.num_hidden_layers, where, ": layer_types has ",
                c.layer_types.size(), " entries for ", c.num_hidden_layers, " layers");
    GLINT_CHECK(int64_t(c.mlp_layer_types.size()) == c.num_hidden_layers, where, ": mlp_layer_types has ",
                c.mlp_layer_types.size(), " entries for ", c.num_hidden_layers, " layers");
    bool csa = false, compressed = false;
    for (const auto& t : c.layer_types) {
      GLINT_CHECK(deepseek_v4_layer_kind_known(t), where, ": layer type '", t, "' is not one of ",
                  kDeepseekV4Sliding, ", ", kDeepseekV4Csa, ", ", kDeepseekV4Hca);
      csa |= t == kDeepseekV4Csa;
      compressed |= t != kDeepseekV4Sliding;
    }
    for (const auto& t : c.mlp_layer_types)
      GLINT_CHECK(t == kHashMoe || t == kMoe, where, ": mlp layer type '", t, "' is not one of ", kHashMoe, ", ",
                  kMoe);
    if (compressed) {
      positive("compress rate of compressed_sparse_attention", v4(c).compress_rate_csa);
      positive("compress rate of heavily_compressed_attention", v4(c).compress_rate_hca);
    }
    if (csa) {
      positive("index_n_heads", v4(c).index_n_heads);
      positive("index_head_dim", v4(c).index_head_dim);
      positive("index_topk", v4(c).index_topk);
      GLINT_CHECK(rd <= v4(c).index_head_dim, where, ": the ", rd, " RoPE dims exceed index_head_dim ",
                  v4(c).index_head_dim);
    }
  }

  LayerParts make_layer(const ModelConfig& c, int64_t layer, const TensorPlacement& p) const override {
    LayerParts parts;
    parts.attention = DeepseekV4Attention(c, layer, p).ptr();
    parts.mlp = MoeBlock(c, p, MoeForm{/*hash_routing=*/c.mlp_layer_types.at(layer) == kHashMoe}).ptr();
    return parts;
  }

  // [0] main (sliding-window layers), [1] compress (compressed layers, their entries and
  // the indexer), both over the last rope_dims(c) dims of a head.
  std::vector<RotaryTables> rotary(const ModelConfig& c, const at::Tensor& position_ids,
                                   c10::ScalarType compute) const override {
    const int64_t rd = rope_dims(c);
    return {rotary_tables(position_ids, rope_inv_freq(rd, c.rope_theta, ModelConfig::RopeScaling{}), 1.0, compute),
            rotary_tables(position_ids, rope_inv_freq(rd, v4(c).compress_rope_theta, c.rope_scaling),
                          rope_attention_factor(c.rope_scaling), compute)};
  }

  ModelConfig tiny(int64_t vocab_size) const override {
    json j = {{"model_type", "deepseek_v4"},
              {"vocab_size", vocab_size},
              {"hidden_size", 32},
              {"num_hidden_layers", 4},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 1},
              {"head_dim", 16},
              {"qk_rope_head_dim", 8},
              {"q_lora_rank", 24},
              {"o_groups", 2},
              {"o_lora_rank", 12},
              {"n_routed_experts", 8},
              {"num_experts_per_tok", 2},
              {"moe_intermediate_size", 16},
              {"num_hash_layers", 1},
              {"layer_types", {kDeepseekV4Sliding, kDeepseekV4Csa, kDeepseekV4Hca, kDeepseekV4Csa}},
              {"compress_rates", {{kDeepseekV4Csa, 4}, {kDeepseekV4Hca, 8}}},
              {"sliding_window", 6},
              {"index_n_heads", 2},
              {"index_head_dim", 8},
              {"index_topk", 3},
              {"hc_mult", 2},
              {"hc_sinkhorn_iters", 4},
              {"max_position_embeddings", 4096},
              {"initializer_range", 0.1},
              {"rope_theta", 10000.0},
              {"compress_rope_theta", 160000.0},
              {"rope_scaling",
               {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1024},
                {"beta_fast", 32}, {"beta_slow", 1}}}};
    return from_json(j, "deepseek_v4 tiny config");
  }

  std::vector<std::string> lora_targets() const override {
    return {"q_a_proj", "q_b_proj", "kv_proj", "o_a_proj", "o_b_proj", "gate_proj", "weights_proj",
            "up_proj", "down_proj", expert_target("gate_up_proj"), expert_target("down_proj")};
  }

  // transformers' names for DeepSeek-V4 (model_key renames the release's "layers.L.ffn.experts.E.w1" to them); saved packed.
  const ExpertKeys& expert_keys() const override {
    static const SpelledExpertKeys keys(ExpertSpelling{
        "model.layers", "mlp", "experts", "gate_proj", "up_proj", "down_proj", "gate_up_proj", "down_proj"});
    return keys;
  }

  // Released names ("layers.3.attn.wq_a.weight", "embed.weight", ".scale") to
  // transformers'; transformers' own names as they are (an older transformers' indexer
  // path without ".scorer" included); multi-token prediction and layers past the config's
  // count skipped.
  std::string model_key(const std::string& stored, const ModelConfig& c) const override {
    if (starts_with(stored, "mtp.") || starts_with(stored, "model.mtp.")) return "";
    std::string key = stored;
    if (starts_with(key, "model.") || starts_with(key, "lm_head.")) {
      const std::string old_indexer = ".compressor.indexer.weights_proj.";
      if (auto at = key.find(old_indexer); at != std::string::npos)
        key.replace(at, old_indexer.size(), ".compressor.indexer.scorer.weights_proj.");
      return beyond_last_layer(key, "model.layers.", c.num_hidden_layers) ? "" : key;
    }
    static const std::vector<std::pair<std::string, std::string>> top = {
        {"embed.weight", "model.embed_tokens.weight"}, {"head.weight", "lm_head.weight"},
        {"norm.weight", "model.norm.weight"},          {"hc_head_fn", "model.hc_head.hc_fn"},
        {"hc_head_base", "model.hc_head.hc_base"},     {"hc_head_scale", "model.hc_head.hc_scale"}};
    for (const auto& [from, to] : top)
      if (key == from) return to;
    if (!starts_with(key, "layers.")) return key;  // not a released name: reported as unexpected
    if (beyond_last_layer(key, "layers.", c.num_hidden_layers)) return "";
    const size_t dot = key.find('.', 7);
    if (dot == std::string::npos) return key;
    std::string layer = key.substr(0, dot + 1), rest = key.substr(dot + 1);  // "layers.3.", "attn.wq_a.weight"
    // A quantised weight's scale: the release's "<linear>.scale" is the weight map's
    // "<linear>.weight_scale_inv" (hc_attn_scale and the like are parameters, not scales).
    const std::string scale = ".scale";
    const bool is_scale =
        rest.size() > scale.size() && rest.compare(rest.size() - scale.size(), scale.size(), scale) == 0;
    if (is_scale) rest = rest.substr(0, rest.size() - scale.size()) + ".weight";
    bool renamed = false;
    for (const auto& [from, to] : layer_renames())
      if (starts_with(rest, from)) {
        rest = to + rest.substr(from.size());
        renamed = true;
        break;
      }
    if (!renamed && starts_with(rest, "ffn.experts.")) {  // ffn.experts.E.w1 -> mlp.experts.E.gate_proj
      static const std::vector<std::pair<std::string, std::string>> projections = {
          {".w1.", ".gate_proj."}, {".w2.", ".down_proj."}, {".w3.", ".up_proj."}};
      rest = "mlp.experts." + rest.substr(12);
      for (const auto& [from, to] : projections)
        if (auto at = rest.find(from); at != std::string::npos) {
          rest.replace(at, from.size(), to);
          break;
        }
    }
    return "model." + layer + rest + (is_scale ? "_scale_inv" : "");
  }

  bool saves_packed_experts() const override { return true; }

 private:
  static int64_t rope_dims(const ModelConfig& c) {
    return int64_t(std::llround(double(c.head_dim) * c.partial_rotary_factor));
  }

  // "layers.N." (after `prefix`) with N >= num_hidden_layers: a multi-token-prediction layer.
  // layer_types (explicit) over the legacy compress_ratios (0, 4 or 128 per layer) over
  // transformers' default; the rates from compress_rates, overridden by the legacy
  // compress_rate_csa / compress_rate_hca. mlp_layer_types over num_hash_layers. Lists
  // longer than the layers (the release's extra entry is its MTP layer) are cut.
  static void read_layer_types(const json& j, const std::string& where, ModelConfig* c) {
    const int64_t n = c->num_hidden_layers;
    if (auto rates = j.find("compress_rates"); rates != j.end() && !rates->is_null()) {
      GLINT_CHECK(rates->is_object(), where, ": field 'compress_rates' must be an object, got ", rates->dump());
      cf::read(*rates, where + " (compress_rates)", kDeepseekV4Csa, &v4(*c).compress_rate_csa);
      cf::read(*rates, where + " (compress_rates)", kDeepseekV4Hca, &v4(*c).compress_rate_hca);
    }
    cf::read(j, where, "compress_rate_csa", &v4(*c).compress_rate_csa);
    cf::read(j, where, "compress_rate_hca", &v4(*c).compress_rate_hca);
    auto types = j.find("layer_types");
    std::vector<int64_t> ratios;
    if (types != j.end() && !types->is_null()) {
      GLINT_CHECK(types->is_array(), where, ": field 'layer_types' must be an array, got ", types->dump());
      for (const auto& t : *types) {
        GLINT_CHECK(t.is_string(), where, ": field 'layer_types' must hold strings, got ", t.dump());
        c->layer_types.push_back(t.get<std::string>());
      }
    } else if (cf::read(j, where, "compress_ratios", &ratios)) {
      for (int64_t r : ratios) {
        GLINT_CHECK(r == 0 || r == 4 || r == 128, where, ": compress_ratios holds ", r,
                    "; it takes only 0 (sliding), 4 (compressed sparse) and 128 (heavily compressed); give "
                    "layer_types and compress_rates for other rates");
        c->layer_types.push_back(r == 0 ? kDeepseekV4Sliding : r == 4 ? kDeepseekV4Csa : kDeepseekV4Hca);
      }
    } else {
      for (int64_t l = 0; l < n; ++l) c->layer_types.push_back(l < 2 || l % 2 == 0 ? kDeepseekV4Hca : kDeepseekV4Csa);
    }
    auto mlp = j.find("mlp_layer_types");
    if (mlp != j.end() && !mlp->is_null()) {
      GLINT_CHECK(mlp->is_array(), where, ": field 'mlp_layer_types' must be an array, got ", mlp->dump());
      for (const auto& t : *mlp) {
        GLINT_CHECK(t.is_string(), where, ": field 'mlp_layer_types' must hold strings, got ", t.dump());
        c->mlp_layer_types.push_back(t.get<std::string>());
      }
    } else {
      int64_t hash_layers = 3;
      cf::read(j, where, "num_hash_layers", &hash_layers);
      GLINT_CHECK(hash_layers >= 0, where, ": num_hash_layers must be >= 0, got ", hash_layers);
      for (int64_t l = 0; l < n; ++l) c->mlp_layer_types.push_back(l < hash_layers ? kHashMoe : kMoe);
    }
    for (auto* list : {&c->layer_types, &c->mlp_layer_types})
      if (int64_t(list->size()) > n) list->resize(n);
  }

  // The two RoPE sets. Nested v5 form: rope_parameters {"main": {...}, "compress": {...}};
  // flat form: rope_theta for main, compress_rope_theta plus rope_scaling (or a flat
  // rope_parameters) for compress. The rotary width: partial_rotary_factor, else
  // qk_rope_head_dim / head_dim, else 64 / 512. A YaRN compress set without an
  // attention_factor gets 1.0 (DeepseekV4Config sets it so).
  static void read_rope(const json& j, const std::string& where, ModelConfig* c) {
    c->partial_rotary_factor = 64.0 / 512.0;
    int64_t rope_head_dim = 0;
    if (!cf::read(j, where, "partial_rotary_factor", &c->partial_rotary_factor) &&
        cf::read(j, where, "qk_rope_head_dim", &rope_head_dim))
      c->partial_rotary_factor = double(rope_head_dim) / double(c->head_dim);
    auto rp = j.find("rope_parameters");
    if (rp != j.end() && rp->is_object() && rp->contains("main") && rp->contains("compress")) {
      const std::string w = where + " (rope_parameters)";
      RopeSet main = rope_set((*rp)["main"], w + " main", "default");
      RopeSet compress = rope_set((*rp)["compress"], w + " compress", "");
      GLINT_CHECK(main.partial_rotary_factor == compress.partial_rotary_factor, w,
                  ": main and compress partial_rotary_factor differ (", main.partial_rotary_factor, " and ",
                  compress.partial_rotary_factor, "); one rotary width per model is supported");
      c->partial_rotary_factor = main.partial_rotary_factor < 0 ? 1.0 : main.partial_rotary_factor;
      cf::read_rope_scaling(json{{"rope_scaling", (*rp)["compress"]}}, w + " compress", /*yarn_allowed=*/true, c);
      c->rope_theta = main.theta;
      v4(*c).compress_rope_theta = compress.theta;
    } else {
      // The scaling block's own rope_theta (if any) is not the main set's: compress_rope_theta
      // is the compressed layers' base.
      const double main_theta = c->rope_theta;
      cf::read_rope_scaling(j, where, /*yarn_allowed=*/true, c);
      c->rope_theta = main_theta;
    }
    if (c->rope_scaling.type == "yarn" && c->rope_scaling.attention_factor == 0) c->rope_scaling.attention_factor = 1.0;
  }

  static RopeSet rope_set(const json& p, const std::string& where, const std::string& required_type) {
    GLINT_CHECK(p.is_object(), where, ": must be an object, got ", p.dump());
    RopeSet s;
    cf::read(p, where, "rope_theta", &s.theta, true);
    cf::read(p, where, "partial_rotary_factor", &s.partial_rotary_factor);
    if (!required_type.empty()) {
      std::string type = cf::rope_type(p, where);
      GLINT_CHECK(type == required_type, where, ": rope_type '", type, "' is not supported here (expected ",
                  required_type, ")");
    }
    return s;
  }

};

}  // namespace

const ModelFamily& deepseek_v4_family() {
  static const DeepseekV4Family family;
  return family;
}

}  // namespace glint
