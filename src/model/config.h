// ModelConfig: the fields of a Hugging Face config.json that glint's decoder uses.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace glint {

struct ModelConfig {
  std::string model_type = "qwen3_moe";  // "qwen3_moe" or "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;             // H
  int64_t intermediate_size = 0;       // dense MLP width
  int64_t moe_intermediate_size = 0;   // I: one expert's width
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;                // defaults to hidden_size / num_attention_heads
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 32768;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  std::string hidden_act = "silu";
  double initializer_range = 0.02;
  // MoE (qwen3_moe only; num_experts == 0 means every layer is dense)
  int64_t num_experts = 0;             // E
  int64_t num_experts_per_tok = 0;     // K
  bool norm_topk_prob = true;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  bool output_router_logits = false;   // adds the load-balancing loss to training
  double router_aux_loss_coef = 0.001;
  std::string torch_dtype = "float32"; // dtype the checkpoint declares

  // True when decoder layer `layer` uses the sparse MoE block.
  bool is_moe_layer(int64_t layer) const;
  // Throws glint::Error naming `where` and the inconsistent fields.
  void validate(const std::string& where) const;
  nlohmann::json to_json() const;
  // Parses config.json content. Unknown model_type, a missing required field or a
  // wrongly typed one throws glint::Error naming `where` (the file) and the field.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where);
  static ModelConfig from_file(const std::string& path);
};

// A small Qwen3-MoE used by `glint train` with no --model and by tests.
ModelConfig tiny_moe_config(int64_t vocab_size);

}  // namespace glint
