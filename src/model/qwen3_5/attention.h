// The two sequence mixers of the Qwen3.5-MoE family.
//
// GatedAttention ("self_attn"): grouped-query attention whose q_proj yields, per head, a
// query and an output gate [q | gate]; (1+w) RMSNorm on queries and keys, RoPE on their
// first rotary dims only, and the attention output times sigmoid(gate) before o_proj.
//
// GatedDeltaNet ("linear_attn"): linear attention with a decaying, delta-rule state.
// in_proj_qkv -> causal depthwise conv1d -> SiLU -> q, k (key heads), v (value heads);
// q, k L2-normalised, q scaled by Dk^-1/2; beta = sigmoid(in_proj_b x); the log decay
// g = -exp(A_log) softplus(in_proj_a x + dt_bias); key head j serves value heads
// j*r .. j*r+r-1; the gated delta rule (model/qwen3_5/gated_delta.h), restarting at every
// packed sequence; RMSNorm(o) * w * silu(in_proj_z x) per value head; out_proj.
// Its input projections come in two forms, chosen by the family:
//   kSplit (Qwen3.5-MoE): in_proj_qkv [C, H] (rows q | k | v, heads contiguous),
//     in_proj_z [Hv*Dv, H], in_proj_b, in_proj_a [Hv, H];
//   kFused (Qwen3-Next): in_proj_qkvz [2 Hk Dk + 2 Hv Dv, H], rows grouped per key head j as
//     [q_j (Dk) | k_j (Dk) | v (r heads x Dv) | z (r heads x Dv)], and in_proj_ba [2 Hv, H],
//     rows per key head as [b (r) | a (r)]; value head j*r + i is slot i of key head j.
//     Reordered into the split form's q | k | v channels before the convolution, so
//     conv1d.weight means the same in both (transformers' fix_query_key_value_ordering).
//
// Legend: B rows, S positions, H hidden, Nh / Nkv query / kv heads, D head_dim, R rotary
// dims, Hk / Hv key / value heads (r = Hv / Hk), Dk / Dv their dims, C conv channels
// (2 Hk Dk + Hv Dv), W conv width.
#pragma once

#include <array>

#include "model/family.h"

namespace glint {

class GatedAttentionImpl : public AttentionModule {
 public:
  GatedAttentionImpl(const ModelConfig& c, const TensorPlacement& place);
  at::Tensor forward(const at::Tensor& x, const LayerContext& ctx) override;  // RoPE: ctx.rope[0], R wide
  at::Tensor forward_cached(const at::Tensor& x, const LayerContext& ctx) override;  // keys and values cached
  bool keeps_decode_state() const override { return true; }
  double decode_state_bytes(int64_t positions, int64_t dtype_bytes) const override;
  double score_macs_per_token(int64_t seq_len) const override;
  ActivationMemory activation_memory(const ActivationShape& shape) const override;

  int64_t num_heads, num_kv_heads, head_dim, rotary_dim;
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};  // q_proj: [Nh*2D, H]
  RMSNorm q_norm{nullptr}, k_norm{nullptr};                                  // (1+w), [D]

 private:
  // q [B,Nh,S,D], k, v [B,Nkv,S,D] (RoPE applied) and the output gate [B,S,Nh*D] of x.
  std::array<at::Tensor, 4> qkv_gate(const at::Tensor& x, const LayerContext& ctx);
};
TORCH_MODULE(GatedAttention);

// A depthwise convolution's weight under the name transformers gives it ("conv1d.weight").
class ConvWeightImpl : public torch::nn::Module {
 public:
  ConvWeightImpl(int64_t channels, int64_t width, const TensorPlacement& place);
  at::Tensor weight;  // [C, 1, W]
};
TORCH_MODULE(ConvWeight);

// The form of GatedDeltaNet's input projections (see above).
enum class DeltaNetProjections { kSplit, kFused };

class GatedDeltaNetImpl : public AttentionModule {
 public:
  GatedDeltaNetImpl(const ModelConfig& c, const TensorPlacement& place,
                    DeltaNetProjections form);
  at::Tensor forward(const at::Tensor& x, const LayerContext& ctx) override;
  // Keeps per row the last W-1 convolution inputs and the recurrent state [Hv,Dk,Dv].
  at::Tensor forward_cached(const at::Tensor& x, const LayerContext& ctx) override;
  bool keeps_decode_state() const override { return true; }
  double decode_state_bytes(int64_t positions, int64_t dtype_bytes) const override;
  double score_macs_per_token(int64_t seq_len) const override;
  ActivationMemory activation_memory(const ActivationShape& shape) const override;

  int64_t key_heads, value_heads, key_dim, value_dim;
  DeltaNetProjections form;
  // kSplit: in_proj_qkv [C, H], in_proj_z [Hv*Dv, H], in_proj_b / in_proj_a [Hv, H].
  Linear in_proj_qkv{nullptr}, in_proj_z{nullptr}, in_proj_b{nullptr}, in_proj_a{nullptr};
  // kFused: in_proj_qkvz [2 Hk Dk + 2 Hv Dv, H], in_proj_ba [2 Hv, H], grouped per key head.
  Linear in_proj_qkvz{nullptr}, in_proj_ba{nullptr};
  ConvWeight conv1d{nullptr};
  at::Tensor dt_bias, A_log;  // [Hv]
  RMSNorm norm{nullptr};      // plain w, [Dv]
  Linear out_proj{nullptr};   // [H, Hv*Dv]

 private:
  // The projections of x [B,S,H] in the split form's layout.
  struct Projected {
    at::Tensor qkv;   // [B,S,C] conv channels: q (Hk*Dk) | k (Hk*Dk) | v (Hv*Dv)
    at::Tensor z;     // [B,S,Hv,Dv]
    at::Tensor b, a;  // [B,S,Hv]
  };
  Projected project(const at::Tensor& x);
  // The rule's inputs from the convolved, activated channels mixed [B,S,C]: q, k
  // [B,S,Hk,Dk] as they are (views; the rule normalises them), v [B,S,Hv,Dv] (a view),
  // g, beta [B,S,Hv] in the compute type.
  struct RuleInputs {
    at::Tensor q, k, v, g, beta;
  };
  RuleInputs rule_inputs(const at::Tensor& mixed, const Projected& in);
  // The gated norm and out_proj of the rule's output o [B,S,Hv,Dv] -> [B,S,H].
  at::Tensor output(const at::Tensor& o, const Projected& in, c10::ScalarType dtype);
};
TORCH_MODULE(GatedDeltaNet);

}  // namespace glint
