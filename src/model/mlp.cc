#include "model/mlp.h"

#include <ATen/ATen.h>

namespace glint {

at::Tensor glu(const at::Tensor& gate, const at::Tensor& up, const Glu& form) {
  at::Tensor g = form.limit > 0 ? gate.clamp_max(form.limit) : gate;
  at::Tensor u = form.limit > 0 ? up.clamp(-form.limit, form.limit) : up;
  if (form.up_offset != 0) u = u + form.up_offset;
  return (form.alpha == 1.0 ? at::silu(g) : g * at::sigmoid(g * form.alpha)) * u;
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up, double limit) {
  return glu(gate, up, Glu{limit});
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
