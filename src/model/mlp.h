// The dense SwiGLU feed-forward block: down(silu(gate(x)) * up(x)).
// (swiglu() is the activation every SwiGLU of the model shares, experts included.)
//
// Legend: H hidden, F intermediate width.
#pragma once

#include "model/family.h"

namespace glint {

// A gated linear unit's activation: gate * sigmoid(alpha * gate) * (up + up_offset), with
// gate clamped to <= limit and up to [-limit, limit] when limit > 0. The defaults are SwiGLU
// (silu(gate) * up); DeepSeek-V4 sets a limit; gpt-oss a limit, alpha 1.702 and offset 1.
struct Glu {
  double limit = 0.0;
  double alpha = 1.0;
  double up_offset = 0.0;
};
at::Tensor glu(const at::Tensor& gate, const at::Tensor& up, const Glu& form);
// The same over one [..., 2I] projection h: gate and up its two halves, or with
// interleaved its even and odd columns. Its gradient is one tensor like h.
at::Tensor glu_packed(const at::Tensor& h, bool interleaved, const Glu& form);
// SwiGLU with a clamp: glu(gate, up, {limit}).
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up, double limit);
// Tensors of width I that glu() and glu_packed() keep for backward, whatever the form: gate
// and up (or the [2I] tensor they are views of) as 2, and the output (the down projection
// keeps it) as 1.
inline constexpr double kGluKeptWidths = 2 + 1;

class DenseMlpImpl : public MlpModule {
 public:
  // swiglu_limit > 0: the gate clamped from above and up to [-limit, limit] (DeepSeek-V4).
  DenseMlpImpl(int64_t hidden, int64_t intermediate, const TensorPlacement& place, double swiglu_limit = 0.0);
  at::Tensor forward(const at::Tensor& x);  // [..., H] -> [..., H]
  at::Tensor forward(const at::Tensor& x, const LayerContext& ctx, std::vector<at::Tensor>* router_logits) override {
    return forward(x);
  }
  ActivationMemory activation_memory(const ActivationShape& shape) const override;
  // Whether backward needs x itself (the gate or up projection does).
  bool keeps_input() const { return gate_proj->keeps_input() || up_proj->keeps_input(); }

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  double swiglu_limit;
};
TORCH_MODULE(DenseMlp);

}  // namespace glint
