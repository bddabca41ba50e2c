#include "model/mlp.h"

#include <ATen/ATen.h>

namespace glint {

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up, double limit) {
  if (limit <= 0) return at::silu(gate) * up;
  return at::silu(gate.clamp_max(limit)) * up.clamp(-limit, limit);
}

DenseMlpImpl::DenseMlpImpl(int64_t hidden, int64_t intermediate, const TensorPlacement& p, double limit)
    : swiglu_limit(limit) {
  gate_proj = register_module("gate_proj", Linear(hidden, intermediate, false, p));
  up_proj = register_module("up_proj", Linear(hidden, intermediate, false, p));
  down_proj = register_module("down_proj", Linear(intermediate, hidden, false, p));
}

at::Tensor DenseMlpImpl::forward(const at::Tensor& x) {
  return down_proj->forward(swiglu(gate_proj->forward(x), up_proj->forward(x), swiglu_limit));
}

}  // namespace glint
