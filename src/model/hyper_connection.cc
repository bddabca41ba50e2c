#include "model/hyper_connection.h"

#include <ATen/ATen.h>

namespace glint {

namespace {

c10::ScalarType mix_dtype(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// The streams [B,S,n,H] flattened per token and RMS-normalised without a weight: [B,S,nH].
at::Tensor normed_flat(const at::Tensor& streams, double eps) {
  at::Tensor f = streams.flatten(-2).to(mix_dtype(streams));
  return f * at::rsqrt(f.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

// sum_i w_i X_i: w [B,S,n], streams [B,S,n,H] -> [B,S,H] in the streams' dtype.
at::Tensor collapse(const at::Tensor& w, const at::Tensor& streams) {
  return (w.unsqueeze(-1) * streams.to(w.scalar_type())).sum(-2).to(streams.scalar_type());
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
  // The flattened streams' norm (and the normed streams where fn trains), the mixing
  // logits where the scales train, pre's and post's sigmoids, pre and post, the softmax
  // and each Sinkhorn division (the matrix and its sums), the final matrix.
  // (One more [n H] in the mixing type is measured kept too: tests/model/activation_memory_test.cc.)
  double kept = cb * (1 + n * H + (fn.requires_grad() ? n * H : 0) + (scale.requires_grad() ? (2 + n) * n : 0) + 4 * n +
                      n * n + (2 * double(sinkhorn_iters) - 1) * (n * n + n) + n * n);
  // The collapsed input, the sublayer's output (scaled by post), the new streams.
  kept += db * (H + H + n * H);
  return kept;
}

at::Tensor HyperConnectionImpl::forward(const at::Tensor& X, const std::function<at::Tensor(const at::Tensor&)>& sublayer) {
  const int64_t n = streams;
  const auto dt = mix_dtype(X);
  at::Tensor m = at::linear(normed_flat(X, norm_eps), fn.to(dt));  // [B,S,(2+n)n]
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
  at::Tensor y = sublayer(collapse(pre, X));                                   // [B,S,H]
  at::Tensor mixed = at::matmul(C.transpose(-1, -2), X.to(dt));               // [B,S,n,H]: sum_j C[j,k] X_j
  return (post.unsqueeze(-1) * y.to(dt).unsqueeze(-2) + mixed).to(X.scalar_type());
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
  at::Tensor m = at::linear(normed_flat(X, norm_eps), hc_fn.to(dt));  // [B,S,n]
  at::Tensor pre = at::sigmoid(m * hc_scale.to(dt) + hc_base.to(dt)) + eps;
  return collapse(pre, X);
}

}  // namespace glint
