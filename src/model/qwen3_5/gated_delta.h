// The two sequence mixers of a Gated DeltaNet layer (Qwen3.5-MoE, Qwen3-Next), as pure
// functions of tensors over a packed [B,S] batch: the causal depthwise convolution in front
// of the recurrence (short_conv.cc), and the gated delta rule itself in its chunk-wise form
// (gated_delta.cc). Both run on any device and are differentiable, each with a backward of
// its own.
//
// Legend: B rows, S positions, Hv value heads, Dk key dim, Dv value dim, C conv channels,
// W kernel width.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

#include "model/layers.h"

namespace glint {

// Causal depthwise conv1d over each sequence of `layout`, without bias:
//   out[b,t,c] = sum_{j<W} weight[c,0,j] * x[b, t-(W-1)+j, c],
// where a position before the start of t's sequence reads as zero, so every sequence is
// convolved as if it were alone in its row (the layout of nn.Conv1d with padding W-1,
// output truncated to S). Padding tokens are sequences of one. With `silu`, silu(out), as
// the layer applies it (in x's dtype).
// x [B,S,C], weight [C,1,W] -> [B,S,C] in x's dtype (accumulated in float32 or wider).
// REQUIRES: B == layout.rows, S == layout.seq_len.
at::Tensor causal_depthwise_conv1d(const at::Tensor& x, const at::Tensor& weight, const SequenceLayout& layout,
                                   bool silu = false);

// The gated delta rule, with the state restarting at zero at every sequence of `layout`.
// q, k [B,S,Hk,Dk], v [B,S,Hv,Dv] with Hv a multiple of Hk (value head h reads key head
// h / (Hv / Hk)), g [B,S,Hv] (log decay, <= 0), beta [B,S,Hv] -> o [B,S,Hv,Dv]. With
// normalize_qk, q and k are first L2-normalised over Dk (see normalized_qk), as the model
// feeds them; without it they are taken as they are. Per token and value head, with the
// state St [Dk,Dv] starting at 0 at the sequence start:
//   St <- exp(g) St;  delta = beta (v - St^T k);  St <- St + k delta^T;  o = St^T q.
// Computed chunk-wise (`chunk` tokens at a time, a loop over chunks carrying the state) in
// float32, or float64 for float64 inputs; returned in q's dtype. Differentiable in all five
// inputs, with a backward of its own that recomputes each chunk's terms. On the CPU
// (core/cpu_kernels.h) the inputs are laid out in chunks, and the outputs back, in one pass
// each way. Outputs at padding tokens are zero.
// With final_state non-null, also sets it to each row's state after the last token of its
// last non-padding sequence, [B,Hv,Dk,Dv] in the compute dtype (zeros for a row of padding
// only): where incremental decoding carries on.
// REQUIRES: B == layout.rows, S == layout.seq_len, chunk >= 1.
at::Tensor gated_delta_rule(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                            const at::Tensor& beta, const SequenceLayout& layout, int64_t chunk = 64,
                            at::Tensor* final_state = nullptr, bool normalize_qk = false);

// q, k [B,S,Hk,Dk] -> each divided by sqrt(|x|^2 + 1e-6) over Dk, q then scaled by Dk^-1/2,
// and each key head repeated for the `heads` / Hk value heads that read it: [B,S,heads,Dk]
// in the compute type (float32, or float64 for float64 inputs).
std::pair<at::Tensor, at::Tensor> normalized_qk(const at::Tensor& q, const at::Tensor& k, int64_t heads);

// Bytes gated_delta_rule keeps for backward per token of sequences of `seq_len` tokens
// (with the default chunk), in the compute type of `dtype_bytes` inputs: its packed inputs,
// and per chunk the state it starts from and the corrected values w; padding to whole
// chunks counted.
double gated_delta_rule_kept_bytes(int64_t seq_len, int64_t Hv, int64_t Dk, int64_t Dv, int64_t dtype_bytes);
// Bytes per token its backward holds at once besides what it keeps: the chunks' [L, L]
// terms and solve recomputed, and the gradients that cross chunks.
double gated_delta_rule_working_bytes(int64_t seq_len, int64_t Hv, int64_t Dk, int64_t Dv, int64_t dtype_bytes);
// Bytes per token a forward without gradients holds at once (decoding's prefill): the
// packed inputs and the chunks' terms.
double gated_delta_rule_forward_bytes(int64_t seq_len, int64_t Hv, int64_t Dk, int64_t Dv, int64_t dtype_bytes);

}  // namespace glint
