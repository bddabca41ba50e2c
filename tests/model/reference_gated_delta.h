// Independent float64 references for the Gated DeltaNet mixers: the per-token gated delta
// recurrence and a per-position causal depthwise convolution, each for ONE sequence,
// written as plain loops over the definitions. They share no code with src/.
//
// Legend: S positions, Hv value heads, Dk key dim, Dv value dim, C channels, W kernel width.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace glint::testing {

// Per token t and head h, with the state St [Dk,Dv] starting at 0:
//   St <- exp(g) St;  delta = beta (v - St^T k);  St <- St + k delta^T;  o = St^T q.
// q, k [S,Hv,Dk], v [S,Hv,Dv], g, beta [S,Hv] -> o [S,Hv,Dv] float64.
inline at::Tensor gated_delta_rule_ref(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       const at::Tensor& g, const at::Tensor& beta) {
  const int64_t S = q.size(0), H = q.size(1), Dk = q.size(2), Dv = v.size(2);
  auto as_double = [](const at::Tensor& t) { return t.detach().to(at::kDouble).contiguous(); };
  at::Tensor qd = as_double(q), kd = as_double(k), vd = as_double(v), gd = as_double(g), bd = as_double(beta);
  auto qa = qd.accessor<double, 3>(), ka = kd.accessor<double, 3>(), va = vd.accessor<double, 3>();
  auto ga = gd.accessor<double, 2>(), ba = bd.accessor<double, 2>();
  at::Tensor o = at::zeros({S, H, Dv}, at::kDouble);
  auto oa = o.accessor<double, 3>();
  for (int64_t h = 0; h < H; ++h) {
    std::vector<double> st(Dk * Dv, 0.0);  // st[i*Dv + j]
    for (int64_t t = 0; t < S; ++t) {
      const double decay = std::exp(ga[t][h]);
      for (double& s : st) s *= decay;
      for (int64_t j = 0; j < Dv; ++j) {
        double recalled = 0;  // (St^T k)_j
        for (int64_t i = 0; i < Dk; ++i) recalled += st[i * Dv + j] * ka[t][h][i];
        const double delta = ba[t][h] * (va[t][h][j] - recalled);
        for (int64_t i = 0; i < Dk; ++i) st[i * Dv + j] += ka[t][h][i] * delta;
      }
      for (int64_t j = 0; j < Dv; ++j) {
        double out = 0;
        for (int64_t i = 0; i < Dk; ++i) out += st[i * Dv + j] * qa[t][h][i];
        oa[t][h][j] = out;
      }
    }
  }
  return o;
}

// nn.Conv1d(C, C, W, groups=C, padding=W-1, bias=False) applied to one sequence, output cut
// to its first S positions: out[t,c] = sum_j weight[c,0,j] * x[t-(W-1)+j, c], zero before 0.
// x [S,C], weight [C,1,W] -> [S,C] float64.
inline at::Tensor causal_depthwise_conv1d_ref(const at::Tensor& x, const at::Tensor& weight) {
  const int64_t S = x.size(0), C = x.size(1), W = weight.size(2);
  at::Tensor xd = x.detach().to(at::kDouble).contiguous(), wd = weight.detach().to(at::kDouble).contiguous();
  auto xa = xd.accessor<double, 2>();
  auto wa = wd.accessor<double, 3>();
  at::Tensor out = at::zeros({S, C}, at::kDouble);
  auto oa = out.accessor<double, 2>();
  for (int64_t t = 0; t < S; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double sum = 0;
      for (int64_t j = 0; j < W; ++j) {
        const int64_t src = t - (W - 1) + j;
        if (src >= 0) sum += wa[c][0][j] * xa[src][c];
      }
      oa[t][c] = sum;
    }
  return out;
}

}  // namespace glint::testing
