// The dense SwiGLU feed-forward block: down(silu(gate(x)) * up(x)).
// (swiglu() is the activation every SwiGLU of the model shares, experts included.)
//
// Legend: H hidden, F intermediate width.
#pragma once

#include "model/family.h"

namespace glint {

// silu(gate) * up, with gate clamped to <= limit and up to [-limit, limit] when limit > 0.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up, double limit);

class DenseMlpImpl : public MlpModule {
 public:
  // swiglu_limit > 0: the gate clamped from above and up to [-limit, limit] (DeepSeek-V4).
  DenseMlpImpl(int64_t hidden, int64_t intermediate, const TensorPlacement& place, double swiglu_limit = 0.0);
  at::Tensor forward(const at::Tensor& x);  // [..., H] -> [..., H]
  at::Tensor forward(const at::Tensor& x, const LayerContext& ctx, std::vector<at::Tensor>* router_logits) override {
    return forward(x);
  }

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  double swiglu_limit;
};
TORCH_MODULE(DenseMlp);

}  // namespace glint
