#include "model/mlp.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include "core/cpu_clones.h"
#include "core/cpu_kernels.h"
#include "core/cpu_math.h"
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

// The activation by ATen's operators (every dtype and device).
at::Tensor glu_value_aten(const at::Tensor& gate, const at::Tensor& up, const Glu& form) {
  auto [g, u] = clamped(gate, up, form);
  return (form.alpha == 1.0 ? at::silu(g) : g * at::sigmoid(g * form.alpha)) * u;
}

// The gradients of the activation by ATen's operators, written into d_gate and d_up. With
// x = alpha g (g, u the clamped inputs), g sigmoid(x) = silu(x) /
// alpha, whose derivative in g is silu'(x): ATen's fused silu_backward. A clamp passes the
// gradient where the value was inside its bounds (bounds included, as torch's clamp).
void glu_gradients_aten(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& d_out, const Glu& form,
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

// ---- float32 on the CPU: the activation and its gradients in one pass each ----------
//
// ATen runs the formula as one pass over [N, I] per operator (clamps, offset, sigmoid,
// products; in the backward silu_backward, the masks, the products): about ten passes
// over tensors of hundreds of MB per layer. Here each element is read once and its
// results written once, rows spread over ATen's threads (exp: core/cpu_math.h, so that
// the loops vectorize).

// gate/up element j of row n: base + n row + j col (col 1: halves, 2: interleaved).
struct GluLayout {
  int64_t rows, width;  // N, I
  int64_t row, col;     // strides of gate and up (and of their gradients)
};

// The clamp bound: +infinity without a limit, so that the loops have no branch.
float bound(const Glu& form) { return form.limit > 0 ? float(form.limit) : std::numeric_limits<float>::infinity(); }

template <int Col>
GLINT_CPU_CLONES void glu_forward_row(const float* g, const float* u, float* o, int64_t I, float L, float alpha,
                                      float off) {
#ifdef _OPENMP
#pragma omp simd
#endif
  for (int64_t j = 0; j < I; ++j) {
    const float g0 = g[j * Col], u0 = u[j * Col];
    const float gv = g0 > L ? L : g0;
    const float uv = (u0 > L ? L : (u0 < -L ? -L : u0)) + off;
    o[j] = gv * uv / (1.f + exp_approx(-alpha * gv));
  }
}

template <int Col>
GLINT_CPU_CLONES void glu_backward_row(const float* g, const float* u, const float* d, float* dg, float* du,
                                       int64_t I, float L, float alpha, float off) {
#ifdef _OPENMP
#pragma omp simd
#endif
  for (int64_t j = 0; j < I; ++j) {
    const float g0 = g[j * Col], u0 = u[j * Col];
    // A clamp passes the gradient inside its bounds, bounds included.
    const float pass_g = g0 > L ? 0.f : 1.f, pass_u = (u0 > L || u0 < -L) ? 0.f : 1.f;
    const float gv = g0 > L ? L : g0;
    const float uv = (u0 > L ? L : (u0 < -L ? -L : u0)) + off;
    const float x = alpha * gv, s = 1.f / (1.f + exp_approx(-x));
    // d/dg of g sigmoid(alpha g) = s (1 + x (1 - s)).
    dg[j * Col] = pass_g * d[j] * uv * s * (1.f + x * (1.f - s));
    du[j * Col] = pass_u * d[j] * gv * s;
  }
}

int64_t rows_per_task(int64_t width) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(1, width)); }

template <int Col>
void glu_forward_rows(const float* gate, const float* up, float* out, const GluLayout& l, const Glu& form) {
  const float L = bound(form), alpha = float(form.alpha), off = float(form.up_offset);
  const int64_t I = l.width;
  at::parallel_for(0, l.rows, rows_per_task(I), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      glu_forward_row<Col>(gate + n * l.row, up + n * l.row, out + n * I, I, L, alpha, off);
  });
}

template <int Col>
void glu_backward_rows(const float* gate, const float* up, const float* d_out, float* d_gate, float* d_up,
                       const GluLayout& l, const Glu& form) {
  const float L = bound(form), alpha = float(form.alpha), off = float(form.up_offset);
  const int64_t I = l.width;
  at::parallel_for(0, l.rows, rows_per_task(I), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      glu_backward_row<Col>(gate + n * l.row, up + n * l.row, d_out + n * I, d_gate + n * l.row, d_up + n * l.row, I,
                            L, alpha, off);
  });
}

void glu_forward_cpu(const float* gate, const float* up, float* out, const GluLayout& l, const Glu& form) {
  if (l.col == 1) return glu_forward_rows<1>(gate, up, out, l, form);
  glu_forward_rows<2>(gate, up, out, l, form);
}

void glu_backward_cpu(const float* gate, const float* up, const float* d_out, float* d_gate, float* d_up,
                      const GluLayout& l, const Glu& form) {
  if (l.col == 1) return glu_backward_rows<1>(gate, up, d_out, d_gate, d_up, l, form);
  glu_backward_rows<2>(gate, up, d_out, d_gate, d_up, l, form);
}

// The kernels' layout of gate and up (views of one tensor, or two alike), where they
// apply: float32 on the CPU, rows whose elements sit `col` apart and rows `row` apart.
std::optional<GluLayout> cpu_layout(const at::Tensor& gate, const at::Tensor& up) {
  if (!cpu_kernels_run(gate.device(), gate.scalar_type()) || gate.scalar_type() != at::kFloat || up.scalar_type() != at::kFloat ||
      !up.device().is_cpu() || gate.sizes() != up.sizes() || gate.dim() < 1 || gate.numel() == 0)
    return std::nullopt;
  const int64_t I = gate.size(-1), N = gate.numel() / I;
  const int64_t col = gate.stride(-1), row = gate.dim() > 1 ? gate.stride(-2) : I * col;
  if (up.stride(-1) != col || (gate.dim() > 1 && up.stride(-2) != row) || (col != 1 && col != 2)) return std::nullopt;
  // Every leading dimension folds into rows `row` apart.
  int64_t expect = row;
  for (int64_t d = gate.dim() - 2; d > 0; --d) {
    expect *= gate.size(d);
    if (gate.stride(d - 1) != expect || up.stride(d - 1) != expect) return std::nullopt;
  }
  return GluLayout{N, I, row, col};
}

at::Tensor glu_value(const at::Tensor& gate, const at::Tensor& up, const Glu& form) {
  const std::optional<GluLayout> l = cpu_layout(gate, up);
  if (!l) return glu_value_aten(gate, up, form);
  std::vector<int64_t> shape = gate.sizes().vec();
  at::Tensor out = at::empty(shape, gate.options());
  glu_forward_cpu(gate.data_ptr<float>(), up.data_ptr<float>(), out.data_ptr<float>(), *l, form);
  return out;
}

// The gradients of glu_value written into d_gate and d_up (views, of one [2I] tensor where
// the input was one, laid out as gate and up are).
void glu_gradients(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& d_out, const Glu& form,
                   at::Tensor& d_gate, at::Tensor& d_up) {
  const std::optional<GluLayout> l = cpu_layout(gate, up);
  const std::optional<GluLayout> dl = cpu_layout(d_gate, d_up);
  if (!l || !dl || dl->row != l->row || dl->col != l->col || d_out.scalar_type() != at::kFloat)
    return glu_gradients_aten(gate, up, d_out, form, d_gate, d_up);
  const at::Tensor d = d_out.contiguous();
  glu_backward_cpu(gate.data_ptr<float>(), up.data_ptr<float>(), d.data_ptr<float>(), d_gate.data_ptr<float>(),
                   d_up.data_ptr<float>(), *l, form);
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
