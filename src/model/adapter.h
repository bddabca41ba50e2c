// The LoRA seam. Model code routes every adaptable matmul through an optional adapter;
// lora/ attaches adapters to a built model from outside.
//
// Legend: N tokens, in/out feature sizes of the adapted projection.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace glint {

// An update that is one low-rank product for every row: delta(x) = scale (x Aᵀ) Bᵀ, with
// A [r, in] and B [out, r] (an expert adapter's: [E, r, in] and [E, out, r]), for the
// projection to fuse into its own GEMMs (core/grouped_linear.h). Undefined A: the update is
// not of this form (rows pick their adapter by tag, dropout is active).
struct LowRank {
  at::Tensor A, B;
  double scale = 1;
};

// Adds a low-rank update to a linear projection: y = x W^T (+ b) + delta(x).
class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  // x: [..., in]  ->  [..., out]
  virtual at::Tensor delta(const at::Tensor& x) const = 0;
  // The update as one low-rank product, A and B in `dtype`, where it is one (see LowRank).
  virtual LowRank low_rank(c10::ScalarType) const { return {}; }
  // Elements it keeps for backward per row of x beyond x itself (x Aᵀ: its rank).
  virtual double kept_per_row() const = 0;
};

// Adds a low-rank update to each expert's projection of a packed expert weight
// [E, out, in]: y_e = x_e W_e^T + delta_e(x_e), applied to each expert's token group
// as a low-rank product (a dense per-expert update is never materialised).
class ExpertAdapter {
 public:
  virtual ~ExpertAdapter() = default;
  // x: [N, in] tokens grouped by local expert, counts[e] rows for expert e  ->  [N, out].
  // tags: [N] int64 tag of each row's token (see TokenTags), or undefined.
  virtual at::Tensor delta(const at::Tensor& x, const std::vector<int64_t>& counts,
                           const at::Tensor& tags) const = 0;
  // The update per expert as one low-rank product, delta_e(x) = scale (x A_eᵀ) B_eᵀ, A and B
  // in `dtype`, where it is one (see LowRank).
  virtual LowRank low_rank(c10::ScalarType) const { return {}; }
  // Elements it keeps for backward per routed row beyond x itself (x A_eᵀ: its rank).
  virtual double kept_per_row() const = 0;
};

// Integer tags of the tokens of the current micro-batch, set from outside the model
// (multi-tenant LoRA: the slot of each sequence's tenant, -1 for none). Tags travel with
// their tokens through the MoE dispatch to the experts' adapters.
struct TokenTags {
  at::Tensor rows;  // [B] int64: one tag per sequence, or undefined (no tags)
  // [B*S] int64: each token's tag (its sequence's), for a batch of S tokens per row.
  at::Tensor per_token(int64_t tokens) const;
};

}  // namespace glint
