// Hyper-connections with a doubly stochastic stream mix (DeepSeek-V4's mHC): the residual
// is n parallel streams instead of one. Around each sublayer, weights computed from the
// streams themselves collapse them into the sublayer's input, spread its output back over
// the streams, and mix the streams through a Sinkhorn-normalised n x n matrix. The head
// collapses the streams once more before the final norm.
//
// For one token with streams X [n, H] (f = X flattened, RMS-normalised without a weight):
//   m    = fn f                                  [(2+n) n]
//   pre  = sigmoid(m[0:n] scale0 + base[0:n]) + eps
//   post = 2 sigmoid(m[n:2n] scale1 + base[n:2n])
//   C    = softmax_rows(m[2n:] scale2 + base[2n:] as [n, n]) + eps, then Sinkhorn: columns,
//          then (iters - 1) rounds of rows and columns, each divided by (sum + eps)
//   x    = sum_i pre_i X_i;  y = sublayer(x);  X'_k = post_k y + sum_j C[j, k] X_j
// The mixing is computed in float32 (float64 for float64 models).
//
// Legend: B rows, S positions, n streams, H hidden.
#pragma once

#include <torch/nn/module.h>

#include <functional>

#include "model/layers.h"

namespace glint {

class HyperConnectionImpl : public torch::nn::Module {
 public:
  HyperConnectionImpl(int64_t streams, int64_t hidden, int64_t sinkhorn_iters, double eps, double norm_eps,
                      const TensorPlacement& place);
  // streams [B,S,n,H] -> [B,S,n,H]; sublayer maps its input [B,S,H] to its output [B,S,H].
  at::Tensor forward(const at::Tensor& streams, const std::function<at::Tensor(const at::Tensor&)>& sublayer);
  // Bytes it keeps for backward per token beyond its input streams, the sublayer's own
  // not counted: the mixing weights and the Sinkhorn steps, the collapsed input (the
  // sublayer's norm keeps it), the sublayer's output, and the new streams.
  double kept_bytes(int64_t dtype_bytes) const;

  int64_t streams, sinkhorn_iters;
  double eps, norm_eps;
  at::Tensor fn;     // [(2+n) n, n H]
  at::Tensor base;   // [(2+n) n]
  at::Tensor scale;  // [3]
};
TORCH_MODULE(HyperConnection);

// The head's collapse ("hc_head"): x = sum_i pre_i X_i with
// pre = sigmoid((hc_fn f) hc_scale + hc_base) + eps.
class HyperConnectionHeadImpl : public torch::nn::Module {
 public:
  HyperConnectionHeadImpl(int64_t streams, int64_t hidden, double eps, double norm_eps, const TensorPlacement& place);
  at::Tensor forward(const at::Tensor& streams);  // [B,S,n,H] -> [B,S,H]

  int64_t streams;
  double eps, norm_eps;
  at::Tensor hc_fn;     // [n, n H]
  at::Tensor hc_base;   // [n]
  at::Tensor hc_scale;  // [1]
};
TORCH_MODULE(HyperConnectionHead);

}  // namespace glint
