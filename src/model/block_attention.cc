#include "model/block_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <limits>

#include "core/blas.h"
#include "core/error.h"

namespace glint {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Layout: queries as [b, G, S, R, D] (the R query heads of a kv head side by side for
// each token, contiguous), keys and values as [b, G, S, .], all contiguous and kept in the
// inputs' dtypes (a bf16 model saves bf16 for backward). A block of n tokens is then a
// contiguous [b, G, n*R, D] slice (rows token-major) and its keys a contiguous
// [b, G, m, D] slice, taken to the compute type block by block (no copy in float32).

// out [b, G, r, c] = beta out + a [b, G, r, k] x w [b, G, k, c], the b*G products spread
// over the threads (core/blas.h); out's first two dimensions must merge (a view).
void gemm_into(const at::Tensor& out, const at::Tensor& a, const at::Tensor& w, double beta = 0) {
  const at::Tensor flat = out.flatten(0, 1);
  GLINT_ASSERT(flat.is_alias_of(out), "gemm_into: an output whose first two dimensions do not merge");
  blas::batched_gemm(flat, a.flatten(0, 1), w.flatten(0, 1), 1.0, beta);
}

// The first key a block starting at token s0 sees.
int64_t first_key(int64_t s0, int64_t window) { return window > 0 ? std::max<int64_t>(0, s0 - window + 1) : 0; }

// Which (row, key) pairs a block hides: rows (token s0 + i, head r) at i*R + r, keys
// [k0, k0 + m) -> [n*R, m]. Without a window only the last n keys (the block's own
// tokens) can be hidden: then [n*R, n] for those keys alone.
at::Tensor block_mask(int64_t s0, int64_t n, int64_t k0, int64_t m, int64_t R, int64_t window,
                      const c10::Device& device) {
  const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor i = at::arange(s0, s0 + n, longs).unsqueeze(1);
  at::Tensor j = window > 0 ? at::arange(k0, k0 + m, longs).unsqueeze(0) : at::arange(s0, s0 + n, longs).unsqueeze(0);
  at::Tensor hidden = j > i;
  if (window > 0) hidden = hidden.logical_or(i - j >= window);
  return R > 1 ? hidden.repeat_interleave(R, 0) : hidden;
}

// The masked scores of one block [b, G, n*R, m]: queries already scaled.
at::Tensor block_scores(const at::Tensor& qb, const at::Tensor& kb, int64_t s0, int64_t n, int64_t k0, int64_t R,
                        int64_t window) {
  const int64_t m = kb.size(2);
  at::Tensor scores = blas::batched_matmul(qb, kb.transpose(-1, -2));
  at::Tensor mask = block_mask(s0, n, k0, m, R, window, qb.device());
  (window > 0 ? scores : scores.narrow(-1, m - n, n)).masked_fill_(mask, -std::numeric_limits<double>::infinity());
  return scores;
}

// Each row's sink logit [G, n*R] for a block of n tokens.
at::Tensor sink_rows(const at::Tensor& sinks, int64_t G, int64_t R, int64_t n, at::ScalarType compute) {
  return sinks.to(compute).view({G, 1, R}).expand({G, n, R}).reshape({G, n * R});
}

// [b, N, S, D] (N = G*R, any strides) -> [b, G, S, R, D] contiguous in `dtype`.
at::Tensor token_major(const at::Tensor& t, int64_t G, at::ScalarType dtype) {
  const int64_t b = t.size(0), N = t.size(1), S = t.size(2), D = t.size(3);
  at::Tensor out = at::empty({b, G, S, N / G, D}, t.options().dtype(dtype));
  return out.copy_(t.reshape({b, G, N / G, S, D}).permute({0, 1, 3, 2, 4}));
}

// The scaled queries of the block of n tokens at s0 [b, G, n*R, D], in the compute type.
at::Tensor block_queries(const at::Tensor& qt, int64_t s0, int64_t n, double scale, at::ScalarType compute) {
  const int64_t b = qt.size(0), G = qt.size(1), R = qt.size(3), D = qt.size(4);
  return qt.narrow(2, s0, n).view({b, G, n * R, D}).to(compute).mul(scale);
}

// [b, G, S, R, D] -> [b, N, S, D] (a view).
at::Tensor head_major(const at::Tensor& t) {
  const int64_t b = t.size(0), G = t.size(1), S = t.size(2), R = t.size(3), D = t.size(4);
  return t.permute({0, 1, 3, 2, 4}).reshape({b, G * R, S, D});
}

struct BlockAttention : torch::autograd::Function<BlockAttention> {
  // sinks: [N], or empty for none (every input of a custom function must be defined).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& sinks_or_empty, double scale, int64_t window, int64_t block) {
    const at::Tensor sinks = sinks_or_empty.numel() > 0 ? sinks_or_empty : at::Tensor();
    const int64_t b = q.size(0), N = q.size(1), S = q.size(2), G = k.size(1), R = N / G,
                  Dv = v.size(3);
    const auto compute = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor qt = token_major(q, G, q.scalar_type());        // [b, G, S, R, D]
    at::Tensor kt = k.contiguous(), vt = v.contiguous();        // [b, G, S, .]
    at::Tensor out = at::empty({b, G, S, R, Dv}, q.options());  // in q's dtype, as returned
    at::Tensor lse = at::empty({b, G, S, R}, q.options().dtype(compute));
    for (int64_t s0 = 0; s0 < S; s0 += block) {
      const int64_t n = std::min(block, S - s0), k0 = first_key(s0, window), m = s0 + n - k0;
      at::Tensor qb = block_queries(qt, s0, n, scale, compute);
      at::Tensor p = block_scores(qb, kt.narrow(2, k0, m).to(compute), s0, n, k0, R, window);  // [b, G, n*R, m]
      at::Tensor row_lse = at::logsumexp(p, -1);                                               // [b, G, n*R]
      if (sinks.defined()) row_lse = at::logaddexp(row_lse, sink_rows(sinks, G, R, n, compute));
      p.sub_(row_lse.unsqueeze(-1)).exp_();
      const at::Tensor out_b = out.narrow(2, s0, n).view({b, G, n * R, Dv});
      if (out.scalar_type() == compute) gemm_into(out_b, p, vt.narrow(2, k0, m));
      else out_b.copy_(blas::batched_matmul(p, vt.narrow(2, k0, m).to(compute)));
      lse.narrow(2, s0, n).view({b, G, n * R}).copy_(row_lse);
    }
    ctx->save_for_backward({qt, kt, vt, sinks_or_empty, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["window"] = window;
    ctx->saved_data["block"] = block;
    ctx->saved_data["types"] = std::vector<int64_t>{int64_t(q.scalar_type()), int64_t(k.scalar_type()),
                                                   int64_t(v.scalar_type())};
    return head_major(out);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &qt = saved[0], &kt = saved[1], &vt = saved[2], &out = saved[4], &lse = saved[5];
    const at::Tensor sinks = saved[3].numel() > 0 ? saved[3] : at::Tensor();
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t window = ctx->saved_data["window"].toInt(), block = ctx->saved_data["block"].toInt();
    const std::vector<int64_t> types = ctx->saved_data["types"].toIntVector();
    const int64_t b = qt.size(0), G = qt.size(1), S = qt.size(2), R = qt.size(3), D = qt.size(4),
                  Dv = vt.size(3);
    const auto compute = lse.scalar_type();
    at::Tensor dout = token_major(grad_out[0], G, compute);         // [b, G, S, R, Dv]
    at::Tensor delta = (dout * out.to(compute)).sum(-1);            // [b, G, S, R]: rowsum(dO * O)
    at::Tensor dq = at::empty({b, G, S, R, D}, lse.options());      // d(scaled q) until the end
    at::Tensor dk = at::zeros({b, G, S, D}, lse.options()), dv = at::zeros({b, G, S, Dv}, lse.options());
    const bool want_sinks = sinks.defined() && ctx->needs_input_grad(3);
    at::Tensor dsinks = want_sinks ? at::zeros({G, R}, lse.options()) : at::Tensor();
    for (int64_t s0 = 0; s0 < S; s0 += block) {
      const int64_t n = std::min(block, S - s0), k0 = first_key(s0, window), m = s0 + n - k0;
      at::Tensor qb = block_queries(qt, s0, n, scale, compute);
      at::Tensor kb = kt.narrow(2, k0, m).to(compute), vb = vt.narrow(2, k0, m).to(compute);
      at::Tensor row_lse = lse.narrow(2, s0, n).view({b, G, n * R});
      at::Tensor row_delta = delta.narrow(2, s0, n).view({b, G, n * R});
      at::Tensor p = block_scores(qb, kb, s0, n, k0, R, window).sub_(row_lse.unsqueeze(-1)).exp_();
      at::Tensor dob = dout.narrow(2, s0, n).view({b, G, n * R, Dv});
      gemm_into(dv.narrow(2, k0, m), p.transpose(-1, -2), dob, /*beta=*/1);
      at::Tensor ds = blas::batched_matmul(dob, vb.transpose(-1, -2)).sub_(row_delta.unsqueeze(-1)).mul_(p);
      gemm_into(dq.narrow(2, s0, n).view({b, G, n * R, D}), ds, kb);
      gemm_into(dk.narrow(2, k0, m), ds.transpose(-1, -2), qb, /*beta=*/1);
      if (want_sinks) {  // d lse / d sink = p_sink; d out . dO through lse: -p_sink * delta
        at::Tensor p_sink = (sink_rows(sinks, G, R, n, compute) - row_lse).exp_();  // [b, G, n*R]
        dsinks.sub_((p_sink * row_delta).view({b, G, n, R}).sum(at::IntArrayRef{0, 2}));
      }
    }
    const auto type = [&](size_t i) { return c10::ScalarType(types[i]); };
    return {head_major(dq.mul_(scale)).to(type(0)), dk.to(type(1)), dv.to(type(2)),
            want_sinks ? dsinks.view({G * R}).to(sinks.scalar_type()) : at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

std::atomic<bool> g_eager{false};

}  // namespace

void set_eager_attention(bool on) { g_eager.store(on); }
bool eager_attention() { return g_eager.load(); }

namespace {

// The keys a block of queries reads at most: the window (and the block's own span) or S.
int64_t block_keys(int64_t S, int64_t window) { return window > 0 ? std::min(window + 64, S) : S; }

}  // namespace

int64_t block_attention_rows(int64_t b, int64_t N, int64_t S, int64_t window) {
  const int64_t rows = std::clamp<int64_t>((int64_t(1) << 22) / std::max<int64_t>(1, b * N * block_keys(S, window)),
                                           16, 256);
  return std::max<int64_t>(1, std::min(rows, S));
}

double block_attention_scores(int64_t b, int64_t N, int64_t S, int64_t window) {
  return double(b) * double(N) * double(block_attention_rows(b, N, S, window)) * double(block_keys(S, window));
}

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
  if (block == 0) block = block_attention_rows(b, N, S, window);
  return BlockAttention::apply(q, k, v, sinks.defined() ? sinks : at::empty({0}, q.options()), scale, window,
                               std::min(block, S));
}

}  // namespace glint
