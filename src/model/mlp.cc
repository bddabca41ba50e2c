#include "model/mlp.h"

#include <ATen/ATen.h>

namespace glint {

DenseMlpImpl::DenseMlpImpl(int64_t hidden, int64_t intermediate, const TensorPlacement& p) {
  gate_proj = register_module("gate_proj", Linear(hidden, intermediate, false, p));
  up_proj = register_module("up_proj", Linear(hidden, intermediate, false, p));
  down_proj = register_module("down_proj", Linear(intermediate, hidden, false, p));
}

at::Tensor DenseMlpImpl::forward(const at::Tensor& x) {
  return down_proj->forward(at::silu(gate_proj->forward(x)) * up_proj->forward(x));
}

}  // namespace glint
