// The dense SwiGLU feed-forward block: down(silu(gate(x)) * up(x)).
//
// Legend: H hidden, F intermediate width.
#pragma once

#include "model/family.h"

namespace glint {

class DenseMlpImpl : public MlpModule {
 public:
  DenseMlpImpl(int64_t hidden, int64_t intermediate, const TensorPlacement& place);
  at::Tensor forward(const at::Tensor& x);  // [..., H] -> [..., H]
  at::Tensor forward(const at::Tensor& x, const LayerContext& ctx, std::vector<at::Tensor>* router_logits) override {
    return forward(x);
  }

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(DenseMlp);

}  // namespace glint
