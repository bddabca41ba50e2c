// Helpers shared by the tests that build models: the CPU placements they build them in,
// and one forward pass to logits.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>

#include "model/causal_lm.h"
#include "model/layers.h"

namespace glint::testing {

inline const TensorPlacement kF64{at::kDouble, c10::Device(c10::kCPU)};
inline const TensorPlacement kF32{at::kFloat, c10::Device(c10::kCPU)};

// Positions 0..S-1 of every row of ids [B,S].
inline at::Tensor positions(const at::Tensor& ids) {
  return at::arange(ids.size(1), at::kLong).repeat({ids.size(0), 1});
}

// The logits [B,S,V] of ids [B,S] at positions `pos` in segments `seg`.
inline at::Tensor logits_of(CausalLMImpl& m, const at::Tensor& ids, const at::Tensor& pos, const at::Tensor& seg) {
  return m.logits(m.forward(ids, pos, seg).hidden);
}

// max |got - want| / max |want|.
inline double max_rel_err(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).abs().max().item<double>() / std::max(want.abs().max().item<double>(), 1e-300);
}

}  // namespace glint::testing
