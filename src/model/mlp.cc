#include "model/mlp.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>

#include "core/error.h"

namespace glint {

namespace {

// gate clamped to <= limit, and up clamped to [-limit, limit] plus up_offset.
std::pair<at::Tensor, at::Tensor> clamped(const at::Tensor& gate, const at::Tensor& up, const Glu& form) {
  at::Tensor g = form.limit > 0 ? gate.clamp_max(form.limit) : gate;
  at::Tensor u = form.limit > 0 ? up.clamp(-form.limit, form.limit) : up;
  if (form.up_offset != 0) u = u + form.up_offset;
  return {g, u};
}

at::Tensor glu_value(const at::Tensor& gate, const at::Tensor& up, const Glu& form) {
  auto [g, u] = clamped(gate, up, form);
  return (form.alpha == 1.0 ? at::silu(g) : g * at::sigmoid(g * form.alpha)) * u;
}

// The gradients of glu_value written into d_gate and d_up (views, of one [2I] tensor where
// the input was one). With x = alpha g (g, u the clamped inputs), g sigmoid(x) = silu(x) /
// alpha, whose derivative in g is silu'(x): ATen's fused silu_backward. A clamp passes the
// gradient where the value was inside its bounds (bounds included, as torch's clamp).
void glu_gradients(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& d_out, const Glu& form,
                   at::Tensor& d_gate, at::Tensor& d_up) {
  auto [g, u] = clamped(gate, up, form);
  const at::Tensor x = form.alpha == 1.0 ? g : g * form.alpha;
  at::silu_backward_out(d_gate, d_out * u, x);
  at::Tensor a = at::silu(x);
  if (form.alpha != 1.0) a.div_(form.alpha);
  at::mul_out(d_up, a, d_out);
  if (form.limit > 0) {
    d_gate.masked_fill_(gate.gt(form.limit), 0);
    d_up.masked_fill_(up.abs().gt(form.limit), 0);
  }
}

Glu glu_form(torch::autograd::AutogradContext* ctx) {
  return Glu{ctx->saved_data["limit"].toDouble(), ctx->saved_data["alpha"].toDouble(),
             ctx->saved_data["up_offset"].toDouble()};
}
void keep_form(torch::autograd::AutogradContext* ctx, const Glu& form) {
  ctx->saved_data["limit"] = form.limit;
  ctx->saved_data["alpha"] = form.alpha;
  ctx->saved_data["up_offset"] = form.up_offset;
}

// The activation with a backward of its own: it keeps gate and up, not the clamped copies,
// the sigmoid and the products that autograd would keep.
struct GluPair : torch::autograd::Function<GluPair> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up,
                            double limit, double alpha, double up_offset) {
    const Glu form{limit, alpha, up_offset};
    ctx->save_for_backward({gate, up});
    keep_form(ctx, form);
    return glu_value(gate, up, form);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::NoGradGuard no_grad;
    auto saved = ctx->get_saved_variables();
    at::Tensor d_gate = at::empty_like(saved[0]), d_up = at::empty_like(saved[1]);
    glu_gradients(saved[0], saved[1], grads[0], glu_form(ctx), d_gate, d_up);
    return {d_gate, d_up, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// gate and up as views of one [N, 2I] projection: halves, or interleaved columns.
std::pair<at::Tensor, at::Tensor> glu_halves(const at::Tensor& h, bool interleaved) {
  const int64_t I = h.size(-1) / 2;
  if (interleaved) return {h.slice(-1, 0, 2 * I, 2), h.slice(-1, 1, 2 * I, 2)};
  return {h.narrow(-1, 0, I), h.narrow(-1, I, I)};
}

// The same over one [N, 2I] input: its gradient is one [N, 2I] tensor, written in place by
// halves (autograd would make a zero-filled [N, 2I] for each view and add them).
struct GluPacked : torch::autograd::Function<GluPacked> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& h, bool interleaved,
                            double limit, double alpha, double up_offset) {
    const Glu form{limit, alpha, up_offset};
    ctx->save_for_backward({h});
    ctx->saved_data["interleaved"] = interleaved;
    keep_form(ctx, form);
    auto [gate, up] = glu_halves(h, interleaved);
    return glu_value(gate, up, form);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::NoGradGuard no_grad;
    const at::Tensor h = ctx->get_saved_variables()[0];
    const bool interleaved = ctx->saved_data["interleaved"].toBool();
    at::Tensor dh = at::empty_like(h, at::MemoryFormat::Contiguous);
    auto [gate, up] = glu_halves(h, interleaved);
    auto [d_gate, d_up] = glu_halves(dh, interleaved);
    glu_gradients(gate, up, grads[0], glu_form(ctx), d_gate, d_up);
    return {dh, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor glu(const at::Tensor& gate, const at::Tensor& up, const Glu& form) {
  if (!at::GradMode::is_enabled() || !(gate.requires_grad() || up.requires_grad())) return glu_value(gate, up, form);
  return GluPair::apply(gate, up, form.limit, form.alpha, form.up_offset);
}

at::Tensor glu_packed(const at::Tensor& h, bool interleaved, const Glu& form) {
  GLINT_CHECK(h.size(-1) % 2 == 0, "glu_packed: the last dimension (", h.size(-1), ") must be even");
  if (!at::GradMode::is_enabled() || !h.requires_grad()) {
    auto [gate, up] = glu_halves(h, interleaved);
    return glu_value(gate, up, form);
  }
  return GluPacked::apply(h, interleaved, form.limit, form.alpha, form.up_offset);
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up, double limit) {
  return glu(gate, up, Glu{limit});
}

ActivationMemory DenseMlpImpl::activation_memory(const ActivationShape& s) const {
  const double T = double(s.rows * s.seq_len), F = double(gate_proj->out_features()), db = double(s.dtype_bytes);
  ActivationMemory m;
  m.saved = T * db *
            (kGluKeptWidths * F + gate_proj->adapter_kept_per_row() +
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
