// RMSNorm on the CPU in float32/float64: per vector one pass forward (its sum of squares,
// then the scaled and gated output) and one backward (the dot product the norm's gradient
// needs, then dx, the gate's gradient and the weight's share), vectors spread over ATen's
// threads. The weight's gradient is summed in fixed blocks of vectors added in order, the
// same whatever the thread count. Elsewhere (a GPU, bf16) ATen's operators.
#include "model/rms_norm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_clones.h"
#include "core/cpu_math.h"
#include "core/cpu_kernels.h"
#include "core/error.h"
#include "core/fixed_blocks.h"

namespace glint {
namespace {

at::Tensor rms_norm_aten(const at::Tensor& x, const at::Tensor& weight, double eps, bool unit_offset,
                         const at::Tensor& gate) {
  const auto compute = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor xf = x.to(compute);
  at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  at::Tensor y;
  // (1 + w) scales in float32 before the cast, as transformers' Qwen3.5 norm does.
  if (unit_offset)
    y = (xf * at::rsqrt(var + eps) * (1.0 + weight.to(compute))).to(x.scalar_type());
  else
    y = weight * (xf * at::rsqrt(var + eps)).to(x.scalar_type());
  if (!gate.defined()) return y;
  return (y.to(compute) * at::silu(gate.to(compute))).to(x.scalar_type());
}

// One vector: y = x r s (times silu(z) where z is not null); returns r = 1 / sqrt(mean(x²) + eps).
template <typename T>
GLINT_CPU_CLONES T norm_row(const T* x, const T* w, T offset, const T* z, int64_t D, T eps, T* y) {
  T squares = 0;
#ifdef _OPENMP
#pragma omp simd reduction(+ : squares)
#endif
  for (int64_t d = 0; d < D; ++d) squares += x[d] * x[d];
  const T r = T(1) / std::sqrt(squares / T(D) + eps);
  if (z) {
#ifdef _OPENMP
#pragma omp simd
#endif
    for (int64_t d = 0; d < D; ++d) y[d] = x[d] * r * (w[d] + offset) * (z[d] / (T(1) + exp_approx(-z[d])));
  } else {
#ifdef _OPENMP
#pragma omp simd
#endif
    for (int64_t d = 0; d < D; ++d) y[d] = x[d] * r * (w[d] + offset);
  }
  return r;
}

// One vector's gradients from dy: dz (z not null), dx, and its share of dw (dw not null).
// With n = x r s: dn = dy silu(z), dz = dy n silu'(z); g = dn s, dx = r (g - x̂ (g·x̂) / D)
// with x̂ = x r; dw += dn x̂. A gated dn is formed in dx, which is then overwritten in place.
template <typename T>
GLINT_CPU_CLONES void norm_grad_row(const T* dy, const T* x, T r, const T* w, T offset, const T* z, int64_t D, T* dx,
                                    T* dz, T* dw) {
  const T* dn = dy;
  if (z) {
#ifdef _OPENMP
#pragma omp simd
#endif
    for (int64_t d = 0; d < D; ++d) {
      const T s = T(1) / (T(1) + exp_approx(-z[d]));
      const T n = x[d] * r * (w[d] + offset);
      dx[d] = dy[d] * z[d] * s;
      dz[d] = dy[d] * n * s * (T(1) + z[d] * (T(1) - s));
    }
    dn = dx;
  }
  if (dw) {
#ifdef _OPENMP
#pragma omp simd
#endif
    for (int64_t d = 0; d < D; ++d) dw[d] += dn[d] * x[d] * r;
  }
  T dot = 0;
#ifdef _OPENMP
#pragma omp simd reduction(+ : dot)
#endif
  for (int64_t d = 0; d < D; ++d) dot += dn[d] * (w[d] + offset) * x[d] * r;
  const T mean = dot / T(D);
#ifdef _OPENMP
#pragma omp simd
#endif
  for (int64_t d = 0; d < D; ++d) dx[d] = r * (dn[d] * (w[d] + offset) - x[d] * r * mean);
}

int64_t grain(int64_t D) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(1, D)); }

// Where each vector of t [..., D] starts (t's last stride is 1): a view's vectors are read
// where they are, so that the norm keeps what ATen's operators would (the view).
std::vector<int64_t> vector_starts(const at::Tensor& t) {
  const int64_t D = t.size(-1), N = t.numel() / std::max<int64_t>(1, D);
  std::vector<int64_t> starts(size_t(N), 0);
  if (t.is_contiguous()) {
    for (int64_t n = 0; n < N; ++n) starts[size_t(n)] = n * D;
    return starts;
  }
  std::vector<int64_t> index(size_t(std::max<int64_t>(0, t.dim() - 1)), 0);
  for (int64_t n = 0; n < N; ++n) {
    int64_t at = 0;
    for (size_t d = 0; d < index.size(); ++d) at += index[d] * t.stride(int64_t(d));
    starts[size_t(n)] = at;
    for (int64_t d = int64_t(index.size()) - 1; d >= 0; --d) {  // the next index, last dimension fastest
      if (++index[size_t(d)] < t.size(d)) break;
      index[size_t(d)] = 0;
    }
  }
  return starts;
}

// x, z (or undefined) [..., D] with vectors at xs, zs; y [N, D] contiguous, w [D], r [N].
template <typename T>
void norm_forward_cpu(const at::Tensor& x, const std::vector<int64_t>& xs, const at::Tensor& w, T offset,
                      const at::Tensor& z, const std::vector<int64_t>& zs, T eps, at::Tensor& y, at::Tensor& r) {
  const int64_t D = x.size(-1), N = int64_t(xs.size());
  const T *xp = x.data_ptr<T>(), *wp = w.data_ptr<T>(), *zp = z.defined() ? z.data_ptr<T>() : nullptr;
  T *yp = y.data_ptr<T>(), *rp = r.data_ptr<T>();
  at::parallel_for(0, N, grain(D), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      rp[n] = norm_row<T>(xp + xs[size_t(n)], wp, offset, zp ? zp + zs[size_t(n)] : nullptr, D, eps, yp + n * D);
  });
}

// dy, dx, dz [N, D] contiguous; x, z as in the forward.
template <typename T>
void norm_backward_cpu(const at::Tensor& dy, const at::Tensor& x, const std::vector<int64_t>& xs, const at::Tensor& r,
                       const at::Tensor& w, T offset, const at::Tensor& z, const std::vector<int64_t>& zs,
                       at::Tensor& dx, at::Tensor& dz, at::Tensor& dw) {
  const int64_t D = x.size(-1), N = int64_t(xs.size());
  const T *dyp = dy.data_ptr<T>(), *xp = x.data_ptr<T>(), *rp = r.data_ptr<T>(), *wp = w.data_ptr<T>(),
          *zp = z.defined() ? z.data_ptr<T>() : nullptr;
  T *dxp = dx.data_ptr<T>(), *dzp = dz.defined() ? dz.data_ptr<T>() : nullptr;
  rows_in_fixed_blocks<T>(N, D, dw.defined() ? dw.data_ptr<T>() : nullptr, [&](int64_t n, T* part) {
    norm_grad_row<T>(dyp + n * D, xp + xs[size_t(n)], rp[n], wp, offset, zp ? zp + zs[size_t(n)] : nullptr, D,
                     dxp + n * D, dzp ? dzp + n * D : nullptr, part);
  });
}

struct RmsNormCpu : torch::autograd::Function<RmsNormCpu> {
  // x and gate (an empty tensor for none) of weight's dtype, each with a last stride of 1.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& gate, double eps, bool unit_offset) {
    const bool gated = gate.numel() > 0;
    at::Tensor y = at::empty(x.sizes(), x.options());
    at::Tensor r = at::empty(x.sizes().slice(0, x.dim() - 1), x.options());
    const at::Tensor w = weight.contiguous();
    const std::vector<int64_t> xs = vector_starts(x), zs = gated ? vector_starts(gate) : std::vector<int64_t>();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "rms_norm", [&] {
      norm_forward_cpu<scalar_t>(x, xs, w, scalar_t(unit_offset ? 1 : 0), gated ? gate : at::Tensor(), zs,
                                 scalar_t(eps), y, r);
    });
    ctx->save_for_backward({x, weight, gate, r});
    ctx->saved_data["unit_offset"] = unit_offset;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::NoGradGuard no_grad;
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &gate = saved[2], &r = saved[3];
    const at::Tensor w = saved[1].contiguous();
    const bool gated = gate.numel() > 0, unit_offset = ctx->saved_data["unit_offset"].toBool();
    const at::Tensor dy = grads[0].contiguous();
    at::Tensor dx = at::empty(x.sizes(), x.options());
    at::Tensor dz = gated ? at::empty(gate.sizes(), gate.options()) : at::Tensor();
    at::Tensor dw = ctx->needs_input_grad(1) ? at::empty_like(w) : at::Tensor();
    const std::vector<int64_t> xs = vector_starts(x), zs = gated ? vector_starts(gate) : std::vector<int64_t>();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "rms_norm_backward", [&] {
      norm_backward_cpu<scalar_t>(dy, x, xs, r, w, scalar_t(unit_offset ? 1 : 0), gated ? gate : at::Tensor(), zs, dx,
                                  dz, dw);
    });
    return {dx, dw, dz, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool unit_offset,
                    const at::Tensor& gate) {
  GLINT_CHECK(x.dim() >= 1 && weight.dim() == 1 && x.size(-1) == weight.size(0), "rms_norm: x ", x.sizes(),
              " and weight ", weight.sizes(), " do not match");
  GLINT_CHECK(!gate.defined() || gate.sizes() == x.sizes(), "rms_norm: gate ", gate.sizes(), " for x ", x.sizes());
  const bool kernel = cpu_kernels_run(x.device(), x.scalar_type()) && weight.device().is_cpu() &&
                      weight.scalar_type() == x.scalar_type() &&
                      (!gate.defined() || (gate.device().is_cpu() && gate.scalar_type() == x.scalar_type()));
  if (!kernel) return rms_norm_aten(x, weight, eps, unit_offset, gate);
  // Views along the last dimension are read in place; anything else is copied first.
  auto readable = [](const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); };
  const at::Tensor none = at::empty({0}, x.options());
  return RmsNormCpu::apply(readable(x), weight, gate.defined() ? readable(gate) : none, eps, unit_offset);
}

}  // namespace glint
