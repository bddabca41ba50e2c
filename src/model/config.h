// ModelConfig: the fields of a Hugging Face config.json that glint's decoder uses, for
// every family. Each family's folder maps its config.json onto these fields (and back);
// a field a family does not read keeps its default.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace glint {

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
  // Multi-head latent attention (deepseek_v3). q_lora_rank 0: a plain q_proj.
  int64_t q_lora_rank = 0, kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  // Routing beyond softmax top-k (deepseek_v3): sigmoid scores, a selection-only
  // correction bias per expert, group-limited top-k, a scale on the routed sum.
  std::string scoring_func = "softmax";  // "softmax" or "sigmoid"
  bool router_correction_bias = false;   // mlp.gate.e_score_correction_bias [E]
  int64_t n_group = 1, topk_group = 1;
  double routed_scaling_factor = 1.0;
  int64_t n_shared_experts = 0;          // shared experts, each moe_intermediate_size wide
  int64_t first_k_dense_replace = 0;     // the first k layers are dense
  int64_t moe_layer_freq = 1;            // then every moe_layer_freq-th layer is MoE
  // Qwen3.5-MoE / Qwen3-Next: (1+w) RMSNorms (weights stored around zero), layer kinds,
  // partial RoPE, Gated DeltaNet sizes, one shared expert behind a sigmoid gate.
  bool norm_unit_offset = false;
  std::vector<std::string> layer_types;  // "full_attention" / "linear_attention"; empty: all full
  double partial_rotary_factor = 1.0;    // RoPE on the first head_dim * factor dims
  int64_t linear_num_key_heads = 0, linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0, linear_value_head_dim = 0, linear_conv_kernel_dim = 0;
  int64_t shared_expert_intermediate_size = 0;  // 0: none; else "shared_expert" + its gate
  // DeepSeek-V4: hyper-connection residual streams (hc_mult 0: a plain residual), attention
  // over a sliding window plus compressed entries (layer_types "sliding_attention",
  // "compressed_sparse_attention" (CSA, with the indexer), "heavily_compressed_attention"
  // (HCA)), per-head sinks, grouped low-rank output, a second RoPE set ("compress":
  // compress_rope_theta with rope_scaling) for compressed layers, sqrtsoftplus routing,
  // hash routing by token id in "hash_moe" layers, clamped SwiGLU experts.
  int64_t hc_mult = 0, hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  int64_t sliding_window = 0;            // 0: unlimited
  int64_t compress_rate_csa = 4, compress_rate_hca = 128;
  int64_t index_n_heads = 0, index_head_dim = 0, index_topk = 0;
  int64_t o_groups = 0, o_lora_rank = 0;
  double compress_rope_theta = 0.0;
  std::vector<std::string> mlp_layer_types;  // "hash_moe" / "moe"; empty: every layer "moe"
  double swiglu_limit = 0.0;             // 0: no clamp

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
};

// A small Qwen3-MoE used by `glint train` with no --model and by tests.
ModelConfig tiny_moe_config(int64_t vocab_size);

}  // namespace glint
