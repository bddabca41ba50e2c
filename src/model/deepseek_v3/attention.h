// DeepSeek-V3 multi-head latent attention (MLA). Queries come from a low-rank path
// (q_a_proj -> q_a_layernorm -> q_b_proj) or a plain q_proj; keys and values from one
// compressed latent (kv_a_proj_with_mqa -> kv_a_layernorm -> kv_b_proj) plus a RoPE part
// shared by every head. Each head's query and key are [nope | rope]; RoPE touches only
// the rope part, interleaved pairs when rope_interleave.
//
// Legend: B rows, S positions, H hidden, N heads, Dn qk_nope_head_dim, R qk_rope_head_dim,
// Dv v_head_dim, Cq q_lora_rank, Ckv kv_lora_rank.
#pragma once

#include <array>

#include "model/family.h"

namespace glint {

class MlaAttentionImpl : public AttentionModule {
 public:
  MlaAttentionImpl(const ModelConfig& c, const TensorPlacement& place);
  // x [B,S,H] -> [B,S,H]; RoPE from ctx.rope[0] (R wide).
  at::Tensor forward(const at::Tensor& x, const LayerContext& ctx) override;
  // Caches the latent: the normed kv_lora_rank-wide vector and the rotated RoPE key per
  // position, which every head shares (Ckv + R values a position instead of N (Dn + R + Dv),
  // 1/71 of it at DeepSeek-V3's shape); a new token's query reads them through kv_b_proj's
  // key half, and its output leaves through the value half (the weight absorbed into the
  // query and output). With an adapter on kv_b_proj (whose delta is known only as a map
  // of its input) it caches every head's expanded key and value instead.
  at::Tensor forward_cached(const at::Tensor& x, const LayerContext& ctx) override;
  bool keeps_decode_state() const override { return true; }
  double decode_state_bytes(int64_t positions, int64_t dtype_bytes) const override;
  double score_macs_per_token(int64_t seq_len) const override;
  ActivationMemory activation_memory(const ActivationShape& shape) const override;

  int64_t num_heads, nope_dim, rope_dim, v_dim, kv_lora_rank;
  bool interleave;
  double softmax_scale;  // qk_head_dim^-1/2, with YaRN's mscale_all_dim correction squared
  Linear q_proj{nullptr};                                 // when q_lora_rank == 0
  Linear q_a_proj{nullptr}, q_b_proj{nullptr};            // [Cq,H], [N*(Dn+R),Cq]
  RMSNorm q_a_layernorm{nullptr};                         // [Cq]
  Linear kv_a_proj_with_mqa{nullptr};                     // [Ckv+R, H]
  RMSNorm kv_a_layernorm{nullptr};                        // [Ckv]
  Linear kv_b_proj{nullptr};                              // [N*(Dn+Dv), Ckv]
  Linear o_proj{nullptr};                                 // [H, N*Dv]

 private:
  struct Projected {
    at::Tensor query;   // [B,N,S,Dn+R], carrying any YaRN correction
    at::Tensor latent;  // [B,S,Ckv], after kv_a_layernorm
    at::Tensor k_rot;   // [B,1,S,R], rotated
  };
  Projected project(const at::Tensor& x, const LayerContext& ctx);
  // Every head's key [B,N,S,Dn+R] and value [B,N,S,Dv], from the latent through kv_b_proj.
  std::array<at::Tensor, 2> expand(const Projected& p);
  // The new tokens' attention over their rows' cached latents -> [B,S,N*Dv].
  at::Tensor latent_attention(const Projected& p, const LayerContext& ctx);
};
TORCH_MODULE(MlaAttention);

}  // namespace glint
