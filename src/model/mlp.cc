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

double glu_kept_widths(const Glu& form) {
  // gate and up (or the [2I] tensor they are views of), the output; a clamp makes new gate
  // and up tensors, SiLU keeps its output, gpt-oss's form also gate * sigmoid and up + 1.
  if (form.alpha != 1.0 || form.up_offset != 0) return 2 + 5;
  return form.limit > 0 ? 2 + 4 : 2 + 2;
}

ActivationMemory DenseMlpImpl::activation_memory(const ActivationShape& s) const {
  const double T = double(s.rows * s.seq_len), F = double(gate_proj->out_features()), db = double(s.dtype_bytes);
  ActivationMemory m;
  m.saved = T * db *
            (glu_kept_widths(Glu{swiglu_limit}) * F + gate_proj->adapter_kept_per_row() +
             up_proj->adapter_kept_per_row() + down_proj->adapter_kept_per_row() + (keeps_input() ? double(gate_proj->in_features()) : 0));
  return m;
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
