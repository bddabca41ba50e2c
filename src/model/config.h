// ModelConfig: the fields of a Hugging Face config.json that glint's decoder uses. The
// shared decoder's (sizes, heads, norms, RoPE, the MoE block, the layer kinds) are
// members; a family's own (MLA's latent ranks, DeepSeek-V4's compressed attention, Gated
// DeltaNet's sizes) are its own struct in its folder, held by `family_fields`. Each
// family's folder maps its config.json onto both (and back); a field a family does not
// read keeps its default.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace glint {

// The base of a family's own config struct. A family derives its struct from
// FamilyFieldsOf<itself> and reads it with ModelConfig::fields<T>().
struct FamilyFields {
  virtual ~FamilyFields() = default;
  virtual std::unique_ptr<FamilyFields> clone() const = 0;
};

template <typename T>
struct FamilyFieldsOf : FamilyFields {
  std::unique_ptr<FamilyFields> clone() const override {
    return std::make_unique<T>(static_cast<const T&>(*this));
  }
};

// Holds one FamilyFields, copied by value.
class FamilyFieldsCopy {
 public:
  FamilyFieldsCopy() = default;
  FamilyFieldsCopy(const FamilyFieldsCopy& o) : p_(o.p_ ? o.p_->clone() : nullptr) {}
  FamilyFieldsCopy& operator=(const FamilyFieldsCopy& o) {
    if (this != &o) p_ = o.p_ ? o.p_->clone() : nullptr;
    return *this;
  }
  FamilyFieldsCopy(FamilyFieldsCopy&&) noexcept = default;
  FamilyFieldsCopy& operator=(FamilyFieldsCopy&&) noexcept = default;
  FamilyFields* get() const { return p_.get(); }
  void reset(std::unique_ptr<FamilyFields> p) { p_ = std::move(p); }

 private:
  std::unique_ptr<FamilyFields> p_;
};

struct ModelConfig {
  std::string model_type = "qwen3_moe";  // selects the family (model/family.h)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;             // H
  int64_t intermediate_size = 0;       // dense MLP width
  int64_t moe_intermediate_size = 0;   // I: one expert's width
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;                // defaults to hidden_size / num_attention_heads
  double rope_theta = 10000.0;
  // RoPE scaling ("rope_scaling" / v5 "rope_parameters"): "" none, or "yarn".
  struct RopeScaling {
    std::string type;
    double factor = 1.0;
    int64_t original_max_position_embeddings = 0;
    double beta_fast = 32.0, beta_slow = 1.0;
    double mscale = 0.0, mscale_all_dim = 0.0;  // 0: absent
    double attention_factor = 0.0;              // 0: derived from factor and the mscales
    bool truncate = true;                       // round the correction range to whole dims
  } rope_scaling;
  bool rope_interleave = false;  // rotate pairs (2i, 2i+1) instead of halves
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 32768;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  std::string hidden_act = "silu";
  double initializer_range = 0.02;
  // MoE, every sparse family (num_experts == 0 means every layer is dense); the layer choice
  // by decoder_sparse_step and mlp_only_layers is the Qwen3 and Qwen3-Next families'.
  int64_t num_experts = 0;             // E
  int64_t num_experts_per_tok = 0;     // K
  bool norm_topk_prob = true;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  bool output_router_logits = false;   // adds the load-balancing loss to training
  double router_aux_loss_coef = 0.001;
  std::string torch_dtype = "float32"; // dtype the checkpoint declares ("torch_dtype", v5 "dtype")
  // The special token ids config.json declares, read and written for every family (the
  // top level, else a multimodal config's text_config, as transformers'
  // GenerationConfig.from_model_config does); absent: nullopt / empty. transformers stops
  // generating at eos_token_id when a model has no generation_config.json.
  std::optional<int64_t> bos_token_id, pad_token_id;
  std::vector<int64_t> eos_token_id;   // config.json holds an int or a list
  bool eos_token_id_is_list = false;   // written back as a list (else as its one int)
  // Routing beyond softmax top-k (deepseek_v3): sigmoid scores, a selection-only
  // correction bias per expert, group-limited top-k, a scale on the routed sum.
  std::string scoring_func = "softmax";  // "softmax" or "sigmoid"
  bool router_correction_bias = false;   // mlp.gate.e_score_correction_bias [E]
  int64_t n_group = 1, topk_group = 1;
  double routed_scaling_factor = 1.0;
  int64_t n_shared_experts = 0;          // shared experts, each moe_intermediate_size wide
  int64_t first_k_dense_replace = 0;     // the first k layers are dense
  int64_t moe_layer_freq = 1;            // then every moe_layer_freq-th layer is MoE
  // (1+w) RMSNorms, weights stored around zero (Qwen3.5-MoE, Qwen3-Next).
  bool norm_unit_offset = false;
  // Each layer's attention kind, as the family names it (Qwen3.5/Next: "full_attention" /
  // "linear_attention"; DeepSeek-V4: "sliding_attention", "compressed_sparse_attention",
  // "heavily_compressed_attention"); empty: every layer the family's default.
  std::vector<std::string> layer_types;
  double partial_rotary_factor = 1.0;    // RoPE on the first head_dim * factor dims
  int64_t sliding_window = 0;            // attention window in tokens; 0: unlimited
  int64_t shared_expert_intermediate_size = 0;  // 0: none; else "shared_expert" + its gate
  // Hyper-connection residual streams (DeepSeek-V4; hc_mult 0: a plain residual).
  int64_t hc_mult = 0, hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  // The MoE block's layer kinds: "hash_moe" (routing by token id) / "moe"; empty: every
  // layer "moe". Experts' SwiGLU clamp: 0 none.
  std::vector<std::string> mlp_layer_types;
  double swiglu_limit = 0.0;
  // The family's own fields (its folder's config struct); none: its defaults. Copied
  // with the config.
  FamilyFieldsCopy family_fields;

  // The family's own fields, T being its struct: its defaults when none are set. A config
  // holding another family's struct is a programming error (std::logic_error).
  template <typename T>
  const T& fields() const {
    static const T kDefaults{};
    if (!family_fields.get()) return kDefaults;
    return checked<T>(family_fields.get());
  }
  // Whether the family fields held, if any, are T.
  template <typename T>
  bool holds_fields() const {
    return !family_fields.get() || dynamic_cast<const T*>(family_fields.get()) != nullptr;
  }
  // For writing: made from the defaults when none are set.
  template <typename T>
  T& fields() {
    if (!family_fields.get()) family_fields.reset(std::make_unique<T>());
    return checked<T>(family_fields.get());
  }

  // True when decoder layer `layer` uses the sparse MoE block.
  bool is_moe_layer(int64_t layer) const;
  // The checks of this config's family (model/family.h): throws glint::Error naming
  // `where` and the inconsistent fields.
  void validate(const std::string& where) const;
  nlohmann::json to_json() const;  // the family's config.json
  // Parses config.json content through the family of its model_type. Unknown model_type,
  // a missing required field or a wrongly typed one throws glint::Error naming `where`
  // (the file) and the field.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where);
  static ModelConfig from_file(const std::string& path);

 private:
  template <typename T>
  T& checked(FamilyFields* f) const {
    T* t = dynamic_cast<T*>(f);
    if (!t) throw std::logic_error("the config of model_type " + model_type + " holds another family's fields");
    return *t;
  }
};

// A small Qwen3-MoE used by `glint train` with no --model and by tests.
ModelConfig tiny_moe_config(int64_t vocab_size);

}  // namespace glint
