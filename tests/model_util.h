// Helpers shared by the tests that build models: the CPU placements they build them in,
// and one forward pass to logits.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <string>

#include "model/causal_lm.h"
#include "model/layers.h"
#include "model/weights.h"

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

// The logits of ids [B,S]: one sequence per row at positions 0..S-1.
inline at::Tensor logits_of(CausalLMImpl& m, const at::Tensor& ids) {
  return logits_of(m, ids, positions(ids), at::zeros_like(ids));
}

// A named edit of a config.json, for tests that run one check over several configs.
struct ConfigVariant {
  const char* name;
  std::function<void(nlohmann::json&)> edit;
};

// Every parameter random around its initialisation (0.3 randn, plus 1 for vectors: norm
// weights around 1), every buffer (router correction biases) 0.3 randn, negative ones among them.
inline void randomize_around_init(CausalLMImpl& m, uint64_t seed) {
  at::NoGradGuard ng;
  at::manual_seed(seed);
  for (auto& p : m.parameters()) p.copy_(at::randn(p.sizes(), p.options()) * 0.3 + (p.dim() == 1 ? 1.0 : 0.0));
  for (auto& b : m.buffers()) b.copy_(at::randn(b.sizes(), b.options()) * 0.3);
}

// The model's tensors under the Hub names, in float64 (the reference implementations' input).
inline std::map<std::string, at::Tensor> hub_weights_f64(CausalLMImpl& m) {
  std::map<std::string, at::Tensor> out;
  for (auto& [k, t] : hub_state_dict(m)) out[k] = t.to(at::kDouble);
  return out;
}

// max |got - want| / max |want|.
inline double max_rel_err(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).abs().max().item<double>() / std::max(want.abs().max().item<double>(), 1e-300);
}

}  // namespace glint::testing
