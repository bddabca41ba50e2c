// GLM-4.5/4.6 attention: grouped-query attention with biases on q/k/v (not on o), an
// optional RMSNorm on each query and key head (use_qk_norm), and rotate-half RoPE on the
// first head_dim * partial_rotary_factor dims of each head.
//
// Legend: B rows, S positions, H hidden, Nh query heads, Nkv key/value heads, D head_dim,
// R rotary dims.
#pragma once

#include <array>

#include "model/family.h"

namespace glint {

class Glm4MoeAttentionImpl : public AttentionModule {
 public:
  Glm4MoeAttentionImpl(const ModelConfig& c, const TensorPlacement& place);
  // x [B,S,H] -> [B,S,H]; RoPE from ctx.rope[0] (R wide).
  at::Tensor forward(const at::Tensor& x, const LayerContext& ctx) override;
  at::Tensor forward_cached(const at::Tensor& x, const LayerContext& ctx) override;  // keys and values cached
  bool keeps_decode_state() const override { return true; }
  double decode_state_bytes(int64_t positions, int64_t dtype_bytes) const override;
  double score_macs_per_token(int64_t seq_len) const override;
  ActivationMemory activation_memory(const ActivationShape& shape) const override;

  int64_t num_heads, num_kv_heads, head_dim, rotary_dim;
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // null without use_qk_norm

 private:
  // q [B,Nh,S,D], k, v [B,Nkv,S,D] of x [B,S,H], RoPE applied.
  std::array<at::Tensor, 3> qkv(const at::Tensor& x, const LayerContext& ctx);
};
TORCH_MODULE(Glm4MoeAttention);

}  // namespace glint
