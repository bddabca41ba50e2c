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
  // Caches each head's expanded key [nope | rope] and value.
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
  // query, key [B,N,S,Dn+R] (the query carrying any YaRN correction), value [B,N,S,Dv].
  std::array<at::Tensor, 3> qkv(const at::Tensor& x, const LayerContext& ctx);
};
TORCH_MODULE(MlaAttention);

}  // namespace glint
