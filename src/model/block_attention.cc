#include "model/block_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <limits>

#include "core/error.h"

namespace glint {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One block of query rows [s0, s0 + n) against keys [k0, k0 + m): which (row, key) pairs
// are hidden, for the rows as laid out in a block (R query heads of a kv head, n rows each).
at::Tensor block_mask(int64_t s0, int64_t n, int64_t k0, int64_t m, int64_t R, int64_t window,
                      const c10::Device& device) {
  at::Tensor i = at::arange(s0, s0 + n, at::TensorOptions().dtype(at::kLong).device(device)).unsqueeze(1);
  at::Tensor j = at::arange(k0, k0 + m, at::TensorOptions().dtype(at::kLong).device(device)).unsqueeze(0);
  at::Tensor hidden = j > i;
  if (window > 0) hidden = hidden.logical_or(i - j >= window);
  return R > 1 ? hidden.repeat({R, 1}) : hidden;  // [R*n, m]
}

// The first key a block starting at row s0 sees.
int64_t first_key(int64_t s0, int64_t window) { return window > 0 ? std::max<int64_t>(0, s0 - window + 1) : 0; }

// The scores of one block, masked: [b, G, R*n, m] in the compute type, and the block's
// queries [b, G, R*n, D] and keys/values [b, G, m, .].
struct Block {
  at::Tensor q, k, v, scores, mask;
};

Block scores_of(const at::Tensor& q5, const at::Tensor& k, const at::Tensor& v, int64_t s0, int64_t n, int64_t k0,
                int64_t window, double scale, at::ScalarType compute) {
  const int64_t b = q5.size(0), G = q5.size(1), R = q5.size(2), D = q5.size(4), m = s0 + n - k0;
  Block o;
  o.q = q5.narrow(3, s0, n).reshape({b, G, R * n, D}).to(compute);
  o.k = k.narrow(2, k0, m).to(compute);
  o.v = v.narrow(2, k0, m).to(compute);
  o.scores = at::matmul(o.q, o.k.transpose(-1, -2)).mul_(scale);
  o.mask = block_mask(s0, n, k0, m, R, window, q5.device());
  o.scores.masked_fill_(o.mask, -std::numeric_limits<double>::infinity());
  return o;
}

// Each row's sink logit [G, R*n] for a block of n rows.
at::Tensor sink_rows(const at::Tensor& sinks, int64_t G, int64_t R, int64_t n, at::ScalarType compute) {
  return sinks.to(compute).view({G, R, 1}).expand({G, R, n}).reshape({G, R * n});
}

struct BlockAttention : torch::autograd::Function<BlockAttention> {
  // sinks: [N], or empty for none (every input of a custom function must be defined).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& sinks_or_empty, double scale, int64_t window, int64_t block) {
    const at::Tensor sinks = sinks_or_empty.numel() > 0 ? sinks_or_empty : at::Tensor();
    const int64_t b = q.size(0), N = q.size(1), S = q.size(2), G = k.size(1), R = N / G, Dv = v.size(3);
    const auto compute = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor q5 = q.reshape({b, G, R, S, q.size(3)});
    at::Tensor out = at::empty({b, G, R, S, Dv}, q.options());
    at::Tensor lse = at::empty({b, G, R, S}, q.options().dtype(compute));
    for (int64_t s0 = 0; s0 < S; s0 += block) {
      const int64_t n = std::min(block, S - s0), k0 = first_key(s0, window);
      Block bl = scores_of(q5, k, v, s0, n, k0, window, scale, compute);
      at::Tensor row_lse = at::logsumexp(bl.scores, -1);  // [b, G, R*n]
      if (sinks.defined()) row_lse = at::logaddexp(row_lse, sink_rows(sinks, G, R, n, compute));
      at::Tensor p = bl.scores.sub_(row_lse.unsqueeze(-1)).exp_();
      out.narrow(3, s0, n).copy_(at::matmul(p, bl.v).view({b, G, R, n, Dv}));
      lse.narrow(3, s0, n).copy_(row_lse.view({b, G, R, n}));
    }
    ctx->save_for_backward({q, k, v, sinks_or_empty, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["window"] = window;
    ctx->saved_data["block"] = block;
    return out.view({b, N, S, Dv});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[4], &lse = saved[5];
    const at::Tensor sinks = saved[3].numel() > 0 ? saved[3] : at::Tensor();
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t window = ctx->saved_data["window"].toInt(), block = ctx->saved_data["block"].toInt();
    const int64_t b = q.size(0), N = q.size(1), S = q.size(2), D = q.size(3), G = k.size(1), R = N / G,
                  Dv = v.size(3);
    const auto compute = lse.scalar_type();
    at::Tensor q5 = q.reshape({b, G, R, S, D});
    at::Tensor dout = grad_out[0].reshape({b, G, R, S, Dv}).to(compute);
    at::Tensor delta = (dout * out.to(compute)).sum(-1);  // [b, G, R, S]: rowsum(dO * O)
    at::Tensor dq = at::empty({b, G, R, S, D}, lse.options());
    at::Tensor dk = at::zeros({b, G, S, D}, lse.options()), dv = at::zeros({b, G, S, Dv}, lse.options());
    const bool want_sinks = sinks.defined() && ctx->needs_input_grad(3);
    at::Tensor dsinks = want_sinks ? at::zeros({G, R}, lse.options()) : at::Tensor();
    for (int64_t s0 = 0; s0 < S; s0 += block) {
      const int64_t n = std::min(block, S - s0), k0 = first_key(s0, window), m = s0 + n - k0;
      Block bl = scores_of(q5, k, v, s0, n, k0, window, scale, compute);
      at::Tensor row_lse = lse.narrow(3, s0, n).reshape({b, G, R * n});
      at::Tensor row_delta = delta.narrow(3, s0, n).reshape({b, G, R * n});
      at::Tensor p = bl.scores.sub_(row_lse.unsqueeze(-1)).exp_();              // [b, G, R*n, m]
      at::Tensor dob = dout.narrow(3, s0, n).reshape({b, G, R * n, Dv});
      dv.narrow(2, k0, m).add_(at::matmul(p.transpose(-1, -2), dob));
      at::Tensor ds = at::matmul(dob, bl.v.transpose(-1, -2)).sub_(row_delta.unsqueeze(-1)).mul_(p).mul_(scale);
      dq.narrow(3, s0, n).copy_(at::matmul(ds, bl.k).view({b, G, R, n, D}));
      dk.narrow(2, k0, m).add_(at::matmul(ds.transpose(-1, -2), bl.q));
      if (want_sinks) {  // d lse / d sink = p_sink; d out . dO through lse: -p_sink * delta
        at::Tensor p_sink = (sink_rows(sinks, G, R, n, compute) - row_lse).exp_();  // [b, G, R*n]
        dsinks.sub_((p_sink * row_delta).view({b, G, R, n}).sum(at::IntArrayRef{0, 3}));
      }
    }
    return {dq.view({b, N, S, D}).to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()),
            want_sinks ? dsinks.view({N}).to(sinks.scalar_type()) : at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

std::atomic<bool> g_eager{false};

}  // namespace

void set_eager_attention(bool on) { g_eager.store(on); }
bool eager_attention() { return g_eager.load(); }

at::Tensor block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                           const at::Tensor& sinks, int64_t window, int64_t block) {
  GLINT_ASSERT(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.size(0) == q.size(0) && v.size(0) == q.size(0) &&
                   k.size(2) == q.size(2) && v.size(2) == q.size(2) && k.size(3) == q.size(3) &&
                   v.size(1) == k.size(1) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
               "block_attention: q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  GLINT_ASSERT(!sinks.defined() || (sinks.dim() == 1 && sinks.size(0) == q.size(1)), "block_attention: sinks ",
               sinks.sizes(), " for ", q.size(1), " heads");
  GLINT_ASSERT(window >= 0 && block >= 0, "block_attention: window ", window, ", block ", block);
  const int64_t b = q.size(0), N = q.size(1), S = q.size(2);
  if (S == 0) return at::empty({b, N, 0, v.size(3)}, q.options());
  if (block == 0) {
    const int64_t keys = window > 0 ? std::min(window + 64, S) : S;
    block = std::clamp<int64_t>((int64_t(1) << 22) / std::max<int64_t>(1, b * N * keys), 16, 256);
  }
  return BlockAttention::apply(q, k, v, sinks.defined() ? sinks : at::empty({0}, q.options()), scale, window,
                               std::min(block, S));
}

}  // namespace glint
