// Decoder building blocks the families share: linear with a LoRA seam, RMSNorm, rotary
// embeddings, causal attention within packed sequences.
//
// Legend: B batch rows, S sequence length, H hidden size, Nh query heads,
// Nkv key/value heads, D head_dim, F dense intermediate size.
#pragma once

#include <torch/nn/module.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "model/adapter.h"
#include "model/config.h"

namespace glint {

// The micro-batch a memory estimate is for (train/memory_estimate.h), and what the
// building blocks below and each family's modules need of memory in it.
struct ActivationShape {
  int64_t rows = 1, seq_len = 1;
  int64_t dtype_bytes = 4;  // the model's dtype (its activations')
};

// What a module needs of memory in one training step, in bytes: what its forward keeps
// for backward, and what it holds at once beyond that while its forward or backward runs.
// Whether its tensors train (--full) or carry adapters (LoRA) is read from the module
// itself, as built and adapted for the run.
struct ActivationMemory {
  double saved = 0;
  double working = 0;
  // What it holds at once in a forward without gradients (decoding's prefill), when the
  // module says; else about the larger of the two above (inference_or_default).
  double inference = 0;
  ActivationMemory& operator+=(const ActivationMemory& o) {
    saved += o.saved;
    working = std::max(working, o.working);
    if (inference > 0 || o.inference > 0) inference = std::max(inference_or_default(), o.inference_or_default());
    return *this;
  }
  double inference_or_default() const { return inference > 0 ? inference : std::max(saved, working); }
};

// Where and how parameters are allocated.
struct TensorPlacement {
  c10::ScalarType dtype = c10::kFloat;
  c10::Device device = c10::Device(c10::kCPU);
  // Allocate large weights without writing them: their pages stay unmapped until a loader
  // fills them, so a model whose layers are loaded sharded never holds them whole.
  bool lazy = false;
};

// A parameter tensor of `shape`: zeros, or left unwritten when place.lazy.
at::Tensor new_weight(at::IntArrayRef shape, const TensorPlacement& place);

class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias, const TensorPlacement& place);
  at::Tensor forward(const at::Tensor& x);  // [..., in] -> [..., out]
  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }
  // For the memory estimate: whether backward needs its input (its weight trains, or an
  // adapter reads it), and the elements per row its adapter keeps beyond it.
  bool keeps_input() const { return weight.requires_grad() || adapter; }
  double adapter_kept_per_row() const { return adapter ? adapter->kept_per_row() : 0.0; }

  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out] or undefined
  std::shared_ptr<LinearAdapter> adapter;  // optional LoRA
};
TORCH_MODULE(Linear);

class RMSNormImpl : public torch::nn::Module {
 public:
  // unit_offset: the scale is (1 + weight), the weight stored around zero (Qwen3.5).
  RMSNormImpl(int64_t dim, double eps, const TensorPlacement& place, bool unit_offset = false);
  // Normalizes over the last dim in float32, returns the input's dtype; with `gate`, times
  // silu(gate) (model/rms_norm.h).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& gate = at::Tensor());
  // Whether it runs as one pass each way for inputs of dtype_bytes (model/rms_norm.h).
  bool one_pass(int64_t dtype_bytes) const;
  // Bytes it keeps for backward per normalized vector of an input of dtype_bytes that
  // needs a gradient, beyond the input itself and the gate (measured:
  // tests/model/activation_memory_test.cc).
  double kept_bytes(int64_t dtype_bytes) const;

  at::Tensor weight;  // [dim]
  double eps;
  bool unit_offset;
};
TORCH_MODULE(RMSNorm);

// cos/sin tables for the given positions: each [B, S, D], computed in float32 as
// transformers does (float64 for float64 models, so reference checks can be exact).
struct RotaryTables {
  at::Tensor cos, sin;
};
RotaryTables rotary_tables(const at::Tensor& position_ids /*[B,S]*/, int64_t head_dim,
                           double theta, c10::ScalarType compute = c10::kFloat);
// The same for given inverse frequencies inv_freq [D/2] (float64), both tables multiplied
// by attention_factor (YaRN's magnitude correction).
RotaryTables rotary_tables(const at::Tensor& position_ids, const at::Tensor& inv_freq, double attention_factor,
                           c10::ScalarType compute);
// RoPE inverse frequencies [dim/2] float64: theta^(-2i/dim), or with YaRN scaling the
// blend of interpolated (/factor) and original frequencies over the correction range
// [beta_fast, beta_slow] rotations of original_max_position_embeddings.
at::Tensor rope_inv_freq(int64_t dim, double theta, const ModelConfig::RopeScaling& scaling);
// YaRN's mscale: 0.1 * mscale * ln(factor) + 1 for factor > 1, else 1.
double yarn_mscale(double factor, double mscale = 1.0);
// The factor on cos and sin: 1 without scaling; YaRN's attention_factor, or
// mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are set, else
// mscale(factor).
double rope_attention_factor(const ModelConfig::RopeScaling& scaling);
// Interleaved RoPE (pairs (2i, 2i+1)) as rotate-half RoPE: x [..., D] with its pairs
// de-interleaved to [evens | odds]. Queries and keys reordered alike keep their products.
at::Tensor deinterleave_pairs(const at::Tensor& x);
// x: [B, Nh, S, D]; rotate-half RoPE (non-interleaved), as transformers does.
at::Tensor apply_rotary(const at::Tensor& x, const RotaryTables& rope);
// Partial RoPE: rotate-half RoPE on the first R dims of x [B, Nh, S, D] (the tables' width),
// the other D - R dims passed through.
at::Tensor apply_partial_rotary(const at::Tensor& x, const RotaryTables& rope, int64_t R);

// Where the sequences of a [B,S] batch lie, read once per forward from its segment ids
// (on the host: attention never waits for the device to learn the lengths). A sequence
// is a run of one segment id >= 0 in a row; it attends causally within itself. Padding
// (segment -1) attends to itself only, so no query is left without a key.
struct SequenceLayout {
  struct Span {
    int64_t row = 0, start = 0, length = 0;
    bool padding = false;  // a run of padding tokens, each its own sequence of one
  };
  int64_t rows = 0, seq_len = 0;
  std::vector<Span> spans;  // in row-major order, covering every position once
  bool rows_alike = false;  // every row has the same spans (one batched kernel per span)
  // For variable-length kernels, on the model's device: int32 [n+1] offsets of every
  // sequence in the flattened [B*S] tokens, each padding token its own sequence, and the
  // longest sequence.
  at::Tensor cu_seqlens;
  int64_t max_length = 0;
};
// segment_ids [B,S] int64. A segment id that appears again after another one in the same
// row is an error (sequences are contiguous).
SequenceLayout sequence_layout(const at::Tensor& segment_ids, const c10::Device& device);

// What attention computes inside one sequence, for sequence_attention: `sequence` over a
// whole sequence's q [b,Nh,L,D], k [b,Nkv,L,D], v [b,Nkv,L,Dv] (causal) -> [b,Nh,L,Dv];
// `padding` over padding tokens, each of which attends to itself alone. Unset (the
// default): softmax(q.k / sqrt(D)) over the earlier keys, and a padding token's value.
struct SequenceKernel {
  using Fn = std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v)>;
  Fn sequence, padding;
};

// Causal attention within each sequence of `layout`: q, k [B,Nh|Nkv,S,D], v [B,Nkv,S,Dv]
// (query head h reads kv head h / (Nh / Nkv)) -> [B,S,Nh*Dv], by `kernel` per sequence.
// Never builds an [S,S] mask: with the default kernel a variable-length kernel on GPU,
// else a fused kernel, else block_attention (model/block_attention.h), per sequence.
at::Tensor sequence_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const SequenceLayout& layout, const SequenceKernel& kernel = {});

// The memory of sequence_attention in a training step (ActivationShape, model/family.h):
// it keeps q, k, v, its output and each row's log-sum-exp; in backward it holds one block
// of scores and their gradient (block_attention) and the gradients of its inputs and
// output. `window` > 0: a sliding window.
ActivationMemory sequence_attention_memory(const ActivationShape& s, int64_t Nh, int64_t Nkv, int64_t D, int64_t Dv,
                                           int64_t window = 0);

// The memory of the usual attention sublayer: q, k, v projections of x (q and k heads
// normalized where q_norm, k_norm are given, a RoPE that keeps nothing of its own),
// sequence_attention, and o_proj over its output.
ActivationMemory projected_attention_memory(const ActivationShape& s, const LinearImpl& q_proj, const LinearImpl& k_proj,
                                            const LinearImpl& v_proj, const LinearImpl& o_proj,
                                            const RMSNormImpl* q_norm, const RMSNormImpl* k_norm, int64_t Nh,
                                            int64_t Nkv, int64_t D, int64_t window = 0);

}  // namespace glint
