// Independent reference computations for model tests: naive loops over tokens, heads and
// experts, written from the Hugging Face definitions, sharing no code with src/model.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

namespace glint::testing {

inline at::Tensor rms_norm_ref(const at::Tensor& x, const at::Tensor& w, double eps) {  // [D]
  double ms = (x * x).mean().item<double>();
  return x / std::sqrt(ms + eps) * w;
}

// Rotate-half RoPE of one head vector at integer position `pos`.
inline at::Tensor rope_ref(const at::Tensor& x, int64_t pos, double theta) {
  int64_t D = x.size(0), half = D / 2;
  at::Tensor out = x.clone();
  for (int64_t d = 0; d < half; ++d) {
    double angle = double(pos) * std::pow(theta, -2.0 * double(d) / double(D));
    double a = x[d].item<double>(), b = x[d + half].item<double>();
    out[d] = a * std::cos(angle) - b * std::sin(angle);
    out[d + half] = b * std::cos(angle) + a * std::sin(angle);
  }
  return out;
}

inline double silu(double v) { return v / (1.0 + std::exp(-v)); }

// Top-k routing of one token: (expert, weight) pairs.
inline std::vector<std::pair<int64_t, double>> route_ref(const at::Tensor& router_w /*[E,H]*/,
                                                         const at::Tensor& x /*[H]*/, int64_t k,
                                                         bool norm_topk) {
  int64_t E = router_w.size(0);
  std::vector<double> logits(E), probs(E);
  double mx = -1e300;
  for (int64_t e = 0; e < E; ++e) {
    logits[e] = (router_w[e] * x).sum().item<double>();
    mx = std::max(mx, logits[e]);
  }
  double z = 0;
  for (int64_t e = 0; e < E; ++e) z += probs[e] = std::exp(logits[e] - mx);
  for (auto& p : probs) p /= z;
  std::vector<int64_t> idx(E);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return probs[a] > probs[b]; });
  std::vector<std::pair<int64_t, double>> out;
  double s = 0;
  for (int64_t i = 0; i < k; ++i) s += probs[idx[i]];
  for (int64_t i = 0; i < k; ++i) out.emplace_back(idx[i], norm_topk ? probs[idx[i]] / s : probs[idx[i]]);
  return out;
}

// One expert's SwiGLU: gate rows [0, I) and up rows [I, 2I) of gate_up [2I,H]; down [H,I].
inline at::Tensor expert_ref(const at::Tensor& gate_up, const at::Tensor& down, const at::Tensor& x) {
  int64_t I = down.size(1);
  at::Tensor g = at::mv(gate_up.narrow(0, 0, I), x), u = at::mv(gate_up.narrow(0, I, I), x);
  at::Tensor h = at::empty({I}, x.options());
  for (int64_t i = 0; i < I; ++i) h[i] = silu(g[i].item<double>()) * u[i].item<double>();
  return at::mv(down, h);
}

// Central finite differences of f at up to `max_entries` entries of `p` (float64),
// compared with p.grad() after one backward of f. Returns the worst relative error.
inline double fd_check(const std::function<at::Tensor()>& f, at::Tensor p, int max_entries = 12,
                       double eps = 1e-6) {
  if (p.grad().defined()) p.mutable_grad() = at::Tensor();
  f().backward();
  at::Tensor g = p.grad().clone().reshape({-1});
  at::Tensor flat = p.detach().view({-1});
  double worst = 0;
  int64_t n = flat.numel(), step = std::max<int64_t>(1, n / max_entries);
  at::NoGradGuard ng;
  for (int64_t i = 0; i < n; i += step) {
    double orig = flat[i].item<double>();
    flat[i] = orig + eps;
    double up = f().item<double>();
    flat[i] = orig - eps;
    double dn = f().item<double>();
    flat[i] = orig;
    double fd = (up - dn) / (2 * eps), an = g[i].item<double>();
    worst = std::max(worst, std::abs(fd - an) / std::max(1e-4, std::abs(fd) + std::abs(an)));
  }
  return worst;
}

}  // namespace glint::testing
