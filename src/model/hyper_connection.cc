#include "model/hyper_connection.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/cpu_kernels.h"
#include "core/cpu_math.h"

namespace glint {

namespace {

c10::ScalarType mix_dtype(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// The mixing logits fn f of the streams [B,S,n,H], f the flattened streams RMS-normalised
// without a weight: (X fn^T) r with r = 1 / sqrt(mean(X^2) + eps) per token, so that no
// normalised copy of the streams is made (nor kept).
at::Tensor mixing_logits(const at::Tensor& streams, const at::Tensor& fn, double eps) {
  const at::Tensor f = streams.flatten(-2).to(mix_dtype(streams));
  return at::linear(f, fn.to(f.scalar_type())) * at::rsqrt(f.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

// Whether the one-pass kernels below take these tensors: the CPU in float32/float64, the
// streams in the mixing type.
bool mix_kernels_run(const at::Tensor& streams, std::initializer_list<at::Tensor> others) {
  if (!cpu_kernels_run(streams.device(), streams.scalar_type())) return false;
  for (const at::Tensor& t : others)
    if (t.device() != streams.device() || t.scalar_type() != streams.scalar_type()) return false;
  return true;
}

// x = sum_j w_j X_j per token: w [T, n], X [T, n, H] -> [T, H], and back.
struct CollapseCpu : torch::autograd::Function<CollapseCpu> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& w, const at::Tensor& X) {
    const int64_t T = X.size(0), n = X.size(1), H = X.size(2);
    at::Tensor out = at::empty({T, H}, X.options());
    AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "hc_collapse", [&] {
      const scalar_t *wp = w.data_ptr<scalar_t>(), *xp = X.data_ptr<scalar_t>();
      scalar_t* op = out.data_ptr<scalar_t>();
      at::parallel_for(0, T, rows_per_task(n * H), [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          scaled_row(op + t * H, xp + t * n * H, wp[t * n], H, false);
          for (int64_t j = 1; j < n; ++j) scaled_row(op + t * H, xp + (t * n + j) * H, wp[t * n + j], H, true);
        }
      });
    });
    ctx->save_for_backward({w, X});
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::NoGradGuard no_grad;
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &w = saved[0], &X = saved[1], dc = grads[0].contiguous();
    const int64_t T = X.size(0), n = X.size(1), H = X.size(2);
    at::Tensor dw = at::empty_like(w), dX = at::empty_like(X);
    AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "hc_collapse_backward", [&] {
      const scalar_t *wp = w.data_ptr<scalar_t>(), *xp = X.data_ptr<scalar_t>(), *gp = dc.data_ptr<scalar_t>();
      scalar_t *dwp = dw.data_ptr<scalar_t>(), *dxp = dX.data_ptr<scalar_t>();
      at::parallel_for(0, T, rows_per_task(n * H), [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t)
          for (int64_t j = 0; j < n; ++j) {
            scaled_row(dxp + (t * n + j) * H, gp + t * H, wp[t * n + j], H, false);
            dwp[t * n + j] = dot_row(xp + (t * n + j) * H, gp + t * H, H);
          }
      });
    });
    return {dw, dX};
  }
};

// X'_k = post_k y + sum_j C[j, k] X_j per token: X [T, n, H], C [T, n, n], post [T, n],
// y [T, H] -> [T, n, H], and back.
struct MixCpu : torch::autograd::Function<MixCpu> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& X, const at::Tensor& C,
                            const at::Tensor& post, const at::Tensor& y) {
    const int64_t T = X.size(0), n = X.size(1), H = X.size(2);
    at::Tensor out = at::empty_like(X);
    AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "hc_mix", [&] {
      const scalar_t *xp = X.data_ptr<scalar_t>(), *cp = C.data_ptr<scalar_t>(), *pp = post.data_ptr<scalar_t>(),
                     *yp = y.data_ptr<scalar_t>();
      scalar_t* op = out.data_ptr<scalar_t>();
      at::parallel_for(0, T, rows_per_task(n * H), [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t)
          for (int64_t k = 0; k < n; ++k) {
            scalar_t* o = op + (t * n + k) * H;
            scaled_row(o, yp + t * H, pp[t * n + k], H, false);
            for (int64_t j = 0; j < n; ++j) scaled_row(o, xp + (t * n + j) * H, cp[(t * n + j) * n + k], H, true);
          }
      });
    });
    ctx->save_for_backward({X, C, post, y});
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::NoGradGuard no_grad;
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &X = saved[0], &C = saved[1], &post = saved[2], &y = saved[3], dO = grads[0].contiguous();
    const int64_t T = X.size(0), n = X.size(1), H = X.size(2);
    at::Tensor dX = at::empty_like(X), dC = at::empty_like(C), dpost = at::empty_like(post), dy = at::empty_like(y);
    AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "hc_mix_backward", [&] {
      const scalar_t *xp = X.data_ptr<scalar_t>(), *cp = C.data_ptr<scalar_t>(), *pp = post.data_ptr<scalar_t>(),
                     *yp = y.data_ptr<scalar_t>(), *gp = dO.data_ptr<scalar_t>();
      scalar_t *dxp = dX.data_ptr<scalar_t>(), *dcp = dC.data_ptr<scalar_t>(), *dpp = dpost.data_ptr<scalar_t>(),
               *dyp = dy.data_ptr<scalar_t>();
      at::parallel_for(0, T, rows_per_task(n * H), [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const scalar_t* g = gp + t * n * H;  // dX'_k at g + k H
          scaled_row(dyp + t * H, g, pp[t * n], H, false);
          for (int64_t k = 1; k < n; ++k) scaled_row(dyp + t * H, g + k * H, pp[t * n + k], H, true);
          for (int64_t k = 0; k < n; ++k) dpp[t * n + k] = dot_row(yp + t * H, g + k * H, H);
          for (int64_t j = 0; j < n; ++j) {
            const scalar_t* xj = xp + (t * n + j) * H;
            scalar_t* dxj = dxp + (t * n + j) * H;
            scaled_row(dxj, g, cp[(t * n + j) * n], H, false);
            for (int64_t k = 1; k < n; ++k) scaled_row(dxj, g + k * H, cp[(t * n + j) * n + k], H, true);
            for (int64_t k = 0; k < n; ++k) dcp[(t * n + j) * n + k] = dot_row(xj, g + k * H, H);
          }
        }
      });
    });
    return {dX, dC, dpost, dy};
  }
};

// sum_i w_i X_i: w [B,S,n], streams [B,S,n,H] -> [B,S,H] in the streams' dtype.
at::Tensor collapse(const at::Tensor& w, const at::Tensor& streams) {
  if (mix_kernels_run(streams, {w})) {
    const int64_t n = streams.size(-2), H = streams.size(-1);
    std::vector<int64_t> shape(streams.sizes().begin(), streams.sizes().end() - 1);
    shape.back() = H;
    return CollapseCpu::apply(w.reshape({-1, n}).contiguous(), streams.reshape({-1, n, H}).contiguous()).view(shape);
  }
  return (w.unsqueeze(-1) * streams.to(w.scalar_type())).sum(-2).to(streams.scalar_type());
}

// post_k y + sum_j C[j, k] X_j: X [B,S,n,H], C [B,S,n,n], post [B,S,n], y [B,S,H] ->
// [B,S,n,H] in X's dtype.
at::Tensor mix(const at::Tensor& X, const at::Tensor& C, const at::Tensor& post, const at::Tensor& y) {
  if (mix_kernels_run(X, {C, post, y})) {
    const int64_t n = X.size(-2), H = X.size(-1);
    return MixCpu::apply(X.reshape({-1, n, H}).contiguous(), C.reshape({-1, n, n}).contiguous(),
                         post.reshape({-1, n}).contiguous(), y.reshape({-1, H}).contiguous())
        .view(X.sizes());
  }
  const auto dt = C.scalar_type();
  at::Tensor mixed = at::matmul(C.transpose(-1, -2), X.to(dt));  // [B,S,n,H]: sum_j C[j,k] X_j
  return (post.unsqueeze(-1) * y.to(dt).unsqueeze(-2) + mixed).to(X.scalar_type());
}

}  // namespace

HyperConnectionImpl::HyperConnectionImpl(int64_t n, int64_t hidden, int64_t iters, double eps_, double norm_eps_,
                                         const TensorPlacement& p)
    : streams(n), sinkhorn_iters(iters), eps(eps_), norm_eps(norm_eps_) {
  fn = register_parameter("fn", new_weight({(2 + n) * n, n * hidden}, p));
  base = register_parameter("base", new_weight({(2 + n) * n}, p));
  scale = register_parameter("scale", new_weight({3}, p));
}

double HyperConnectionImpl::kept_bytes(int64_t dtype_bytes) const {
  const double n = double(streams), H = double(fn.size(1)) / n, db = double(dtype_bytes), cb = dtype_bytes == 8 ? 8 : 4;
  // The flattened streams' norm and the logits it scales (no normalised copy of the streams:
  // where fn trains, its product keeps the streams themselves), the mixing logits where the
  // scales train, pre's and post's sigmoids, pre and post, the softmax and each Sinkhorn
  // division (the matrix and its sums), the final matrix.
  // (One more [n H] in the mixing type is measured kept too: tests/model/hyper_connection_test.cc.)
  double kept = cb * (1 + n * H + (2 + n) * n + (scale.requires_grad() ? (2 + n) * n : 0) + 4 * n + n * n +
                      (2 * double(sinkhorn_iters) - 1) * (n * n + n) + n * n);
  // The collapsed input, the sublayer's output (scaled by post), the new streams.
  kept += db * (H + H + n * H);
  return kept;
}

at::Tensor HyperConnectionImpl::forward(const at::Tensor& X, const std::function<at::Tensor(const at::Tensor&)>& sublayer) {
  const int64_t n = streams;
  const auto dt = mix_dtype(X);
  at::Tensor m = mixing_logits(X, fn, norm_eps);  // [B,S,(2+n)n]
  at::Tensor b = base.to(dt), s = scale.to(dt);
  at::Tensor pre = at::sigmoid(m.narrow(-1, 0, n) * s[0] + b.narrow(0, 0, n)) + eps;        // [B,S,n]
  at::Tensor post = 2.0 * at::sigmoid(m.narrow(-1, n, n) * s[1] + b.narrow(0, n, n));       // [B,S,n]
  std::vector<int64_t> square(m.sizes().begin(), m.sizes().end() - 1);
  square.push_back(n);
  square.push_back(n);
  at::Tensor logits = m.narrow(-1, 2 * n, n * n) * s[2] + b.narrow(0, 2 * n, n * n);
  at::Tensor C = at::softmax(logits.view(square), -1) + eps;  // [B,S,n,n]
  C = C / (C.sum(-2, /*keepdim=*/true) + eps);
  for (int64_t i = 1; i < sinkhorn_iters; ++i) {
    C = C / (C.sum(-1, /*keepdim=*/true) + eps);
    C = C / (C.sum(-2, /*keepdim=*/true) + eps);
  }
  at::Tensor y = sublayer(collapse(pre, X));  // [B,S,H]
  return mix(X, C, post, y);
}

HyperConnectionHeadImpl::HyperConnectionHeadImpl(int64_t n, int64_t hidden, double eps_, double norm_eps_,
                                                 const TensorPlacement& p)
    : streams(n), eps(eps_), norm_eps(norm_eps_) {
  hc_fn = register_parameter("hc_fn", new_weight({n, n * hidden}, p));
  hc_base = register_parameter("hc_base", new_weight({n}, p));
  hc_scale = register_parameter("hc_scale", new_weight({1}, p));
}

at::Tensor HyperConnectionHeadImpl::forward(const at::Tensor& X) {
  const auto dt = mix_dtype(X);
  at::Tensor m = mixing_logits(X, hc_fn, norm_eps);  // [B,S,n]
  at::Tensor pre = at::sigmoid(m * hc_scale.to(dt) + hc_base.to(dt)) + eps;
  return collapse(pre, X);
}

}  // namespace glint
