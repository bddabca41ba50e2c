// Decoder building blocks shared by the Qwen3 families: linear with a LoRA seam,
// RMSNorm, rotary embeddings, grouped-query attention with q/k norm, dense SwiGLU MLP.
//
// Legend: B batch rows, S sequence length, H hidden size, Nh query heads,
// Nkv key/value heads, D head_dim, F dense intermediate size.
#pragma once

#include <torch/nn/module.h>

#include <memory>

#include "model/adapter.h"
#include "model/config.h"

namespace glint {

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

  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out] or undefined
  std::shared_ptr<LinearAdapter> adapter;  // optional LoRA
};
TORCH_MODULE(Linear);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, const TensorPlacement& place);
  // Normalizes over the last dim in float32, returns the input's dtype.
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight;  // [dim]
  double eps;
};
TORCH_MODULE(RMSNorm);

// cos/sin tables for the given positions: each [B, S, D], computed in float32 as
// transformers does (float64 for float64 models, so reference checks can be exact).
struct RotaryTables {
  at::Tensor cos, sin;
};
RotaryTables rotary_tables(const at::Tensor& position_ids /*[B,S]*/, int64_t head_dim,
                           double theta, c10::ScalarType compute = c10::kFloat);
// x: [B, Nh, S, D]; rotate-half RoPE (non-interleaved), as transformers does.
at::Tensor apply_rotary(const at::Tensor& x, const RotaryTables& rope);

// Additive attention mask [B, 1, S, S] in float32: 0 where query i may attend key j
// (same segment and j <= i), -inf elsewhere. Padding (segment -1) attends to itself only,
// so no row is fully masked.
at::Tensor segment_causal_mask(const at::Tensor& segment_ids /*[B,S]*/);

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& c, const TensorPlacement& place);
  // x [B,S,H], mask from segment_causal_mask -> [B,S,H]
  at::Tensor forward(const at::Tensor& x, const RotaryTables& rope, const at::Tensor& mask);

  int64_t num_heads, num_kv_heads, head_dim;
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
};
TORCH_MODULE(Attention);

class DenseMlpImpl : public torch::nn::Module {
 public:
  DenseMlpImpl(int64_t hidden, int64_t intermediate, const TensorPlacement& place);
  at::Tensor forward(const at::Tensor& x);  // [..., H] -> [..., H]

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(DenseMlp);

}  // namespace glint
