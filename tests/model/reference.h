// Independent reference computations for model tests: naive loops over tokens, heads and
// experts, written from the Hugging Face definitions, sharing no code with src/model.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <utility>
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

// Smallest gap, over the rows of x [T,H], between the k-th and (k+1)-th router
// probability: top-k is stable under perturbations much smaller than this.
inline double topk_margin_ref(const at::Tensor& router_w /*[E,H]*/, const at::Tensor& x, int64_t k) {
  at::Tensor p = at::softmax(at::matmul(x.detach().to(at::kDouble), router_w.detach().to(at::kDouble).t()), -1);
  at::Tensor sorted = std::get<0>(at::sort(p, -1, /*descending=*/true));
  if (k >= p.size(1)) return 1.0;
  return (sorted.select(1, k - 1) - sorted.select(1, k)).min().item<double>();
}

// One expert's SwiGLU: gate rows [0, I) and up rows [I, 2I) of gate_up [2I,H]; down [H,I].
inline at::Tensor expert_ref(const at::Tensor& gate_up, const at::Tensor& down, const at::Tensor& x) {
  int64_t I = down.size(1);
  at::Tensor g = at::mv(gate_up.narrow(0, 0, I), x), u = at::mv(gate_up.narrow(0, I, I), x);
  at::Tensor h = at::empty({I}, x.options());
  for (int64_t i = 0; i < I; ++i) h[i] = silu(g[i].item<double>()) * u[i].item<double>();
  return at::mv(down, h);
}

// Weights of one attention block for attention_ref, in the Hugging Face layouts.
struct AttentionRefWeights {
  at::Tensor Wq, Wk, Wv, Wo;  // [Nh*D, H], [Nkv*D, H], [Nkv*D, H], [H, Nh*D]
  at::Tensor bq, bk, bv, bo;  // biases, or undefined
  at::Tensor q_norm, k_norm;  // [D]
  int64_t Nh = 0, Nkv = 0, D = 0;
  double eps = 1e-6, theta = 10000.0;
};

// Naive attention of one row in float64: x [S, H], per-token positions and segment ids
// -> [S, H]. Query i attends keys j <= i of its own segment; a padding token (segment < 0)
// attends only itself. Query head h reads kv head h / (Nh / Nkv).
inline at::Tensor attention_ref(const AttentionRefWeights& w, const at::Tensor& x_in,
                                const std::vector<int64_t>& pos, const std::vector<int64_t>& seg) {
  auto d = [](const at::Tensor& t) { return t.defined() ? t.detach().to(at::kDouble) : t; };
  at::Tensor x = d(x_in);
  const int64_t S = x.size(0), D = w.D;
  auto proj = [&](const at::Tensor& W, const at::Tensor& b, int64_t head, const at::Tensor& v) {
    at::Tensor y = at::mv(d(W).narrow(0, head * D, D), v);
    return b.defined() ? y + d(b).narrow(0, head * D, D) : y;
  };
  at::Tensor heads = at::zeros({S, w.Nh * D}, at::kDouble);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t h = 0; h < w.Nh; ++h) {
      int64_t kvh = h / (w.Nh / w.Nkv);
      at::Tensor q = rope_ref(rms_norm_ref(proj(w.Wq, w.bq, h, x[i]), d(w.q_norm), w.eps), pos[i], w.theta);
      std::vector<int64_t> keys;
      for (int64_t j = 0; j <= i; ++j)
        if (seg[i] < 0 ? j == i : seg[j] == seg[i]) keys.push_back(j);
      std::vector<double> p;
      for (int64_t j : keys) {
        at::Tensor k = rope_ref(rms_norm_ref(proj(w.Wk, w.bk, kvh, x[j]), d(w.k_norm), w.eps), pos[j], w.theta);
        p.push_back((q * k).sum().item<double>() / std::sqrt(double(D)));
      }
      double mx = *std::max_element(p.begin(), p.end()), z = 0;
      for (double& s : p) z += s = std::exp(s - mx);
      at::Tensor o = at::zeros({D}, at::kDouble);
      for (size_t n = 0; n < keys.size(); ++n) o += p[n] / z * proj(w.Wv, w.bv, kvh, x[keys[n]]);
      heads[i].narrow(0, h * D, D).copy_(o);
    }
  at::Tensor out = at::matmul(heads, d(w.Wo).t());
  return w.bo.defined() ? out + d(w.bo) : out;
}

// Dense SwiGLU MLP of one token: down (silu(gate x) * up x).
inline at::Tensor dense_mlp_ref(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down,
                                const at::Tensor& x) {
  at::Tensor g = at::mv(gate, x), u = at::mv(up, x);
  at::Tensor h = at::empty_like(g);
  for (int64_t i = 0; i < g.size(0); ++i) h[i] = silu(g[i].item<double>()) * u[i].item<double>();
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
