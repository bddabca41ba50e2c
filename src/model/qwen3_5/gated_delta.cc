// Legend: B rows, S positions, Hv value heads, Dk key dim, Dv value dim, C conv channels,
// W kernel width. Inside the chunked rule: N sequences batched together, P their padded
// length, L the chunk length, K = P / L chunks, F = 2 Dk + Dv + 2 packed input features.
#include "model/qwen3_5/gated_delta.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "core/blas.h"
#include "core/error.h"
#include "core/op_profile.h"

namespace glint {
namespace {

using Span = SequenceLayout::Span;

// The spans of every block of rows that one batched computation serves: all rows at once
// when the layout says they are alike (the spans of row 0 stand for every row), else one
// row per block.
std::vector<std::vector<Span>> spans_per_block(const SequenceLayout& layout) {
  std::vector<std::vector<Span>> blocks(layout.rows_alike ? 1 : layout.rows);
  for (const Span& span : layout.spans) {
    GLINT_ASSERT(span.row >= 0 && span.row < layout.rows, "span in row ", span.row, " of a layout of ", layout.rows,
                 " rows");
    if (!layout.rows_alike)
      blocks[span.row].push_back(span);
    else if (span.row == 0)
      blocks[0].push_back(span);
  }
  for (const auto& block : blocks) {
    int64_t next = 0;
    for (const Span& span : block) {
      GLINT_ASSERT(span.start == next && span.length >= 0, "span [", span.start, ", +", span.length,
                   ") where position ", next, " was expected");
      next += span.length;
    }
    GLINT_ASSERT(next == layout.seq_len, "spans cover ", next, " of ", layout.seq_len, " positions");
  }
  return blocks;
}

// x [B,S,...] cut the way spans_per_block groups the rows: x itself, or one row each.
std::vector<at::Tensor> rows_per_block(const at::Tensor& x, const SequenceLayout& layout) {
  if (layout.rows_alike) return {x};
  return x.split(1, 0);
}

// The delta rule of N sequences that each start at position 0 of x and fill it, or are
// followed by zero padding (k = v = q = 0, g = beta = 0, which touches neither the earlier
// outputs nor anything read later). Below, the chunks are laid out [K, N H, L, ...], chunk
// major, so that one chunk of every sequence and head is one contiguous block.
//
// Within a chunk, with G the cumulative log decay from the chunk start, M[i,j] =
// e^{G_i - G_j} for j <= i (else 0) and S the state entering the chunk, the outputs are
//   o = (q k^T * M) w + (q e^G) S,   w = U - Y S,
// and the state after it is S' = e^{G_last} S + (k e^{G_last - G})^T w, where [U | Y] solves
// T [U | Y] = [beta v | beta e^G k] with T = I + strictly_lower(beta k k^T * M) (the WY form
// of the chunk's products of Householder-like updates). Every exponent is <= 0. Only the
// state crosses chunks: the loop over chunks runs two [L, D] x [D, D] products per chunk and
// everything else is batched over all chunks at once.

at::Tensor mT(const at::Tensor& t) { return t.transpose(-1, -2); }

struct ChunkTerms {
  at::Tensor q, k, v, beta;  // [K, B, L, Dk] x2, [K, B, L, Dv], [K, B, L, 1]: views of the chunks
  at::Tensor eG;             // [K, B, L, 1]: e^G
  at::Tensor M;              // [K, B, L, L]
  at::Tensor A;              // [K, B, L, L]: beta k k^T * M; the solve reads its strictly lower part
  at::Tensor KKM;            // [K, B, L, L]: k k^T * M, in place of A where [U | Y] is given
  at::Tensor uy;             // [K, B, L, Dv + Dk]: [U | Y]
  at::Tensor intra;          // [K, B, L, L]: q k^T * M
  at::Tensor to_end;         // [K, B, L, 1]: e^{G_last - G}
  at::Tensor kd;             // [K, B, L, Dk]: k e^{G_last - G}
  at::Tensor d;              // [K, B, 1, 1]: e^{G_last}
};

// The terms of chunks xc [K, B, L, F]; with `uy` defined, [U | Y] is taken from it instead of
// solved for.
ChunkTerms chunk_terms(const at::Tensor& xc, int64_t Dk, int64_t Dv, const at::Tensor& uy = at::Tensor()) {
  const int64_t L = xc.size(-2);
  std::vector<at::Tensor> parts = xc.split_with_sizes({Dk, Dk, Dv, 1, 1}, -1);
  ChunkTerms t;
  t.q = parts[0];
  t.k = parts[1];
  t.v = parts[2];
  t.beta = parts[4];
  const at::Tensor G = parts[3].squeeze(-1).cumsum(-1);  // [K, B, L]
  t.eG = G.exp().unsqueeze(-1);
  // Masked before exp: G_i - G_j > 0 above the diagonal and could overflow.
  const at::Tensor above = at::ones({L, L}, xc.options().dtype(at::kBool)).triu(1);
  t.M = (G.unsqueeze(-1) - G.unsqueeze(-2)).masked_fill_(above, -std::numeric_limits<double>::infinity()).exp_();
  if (uy.defined()) {
    t.KKM = blas::batched_matmul(t.k, mT(t.k)).mul_(t.M);
    t.uy = uy;
  } else {
    at::Tensor rhs = at::empty({xc.size(0), xc.size(1), L, Dv + Dk}, xc.options());  // [beta v | beta e^G k]
    at::Tensor v_beta = rhs.narrow(-1, 0, Dv), k_beta = rhs.narrow(-1, Dv, Dk);
    at::mul_out(v_beta, t.v, t.beta);
    at::mul_out(k_beta, t.k, t.beta);
    t.A = blas::batched_matmul(k_beta, mT(t.k)).mul_(t.M);
    k_beta.mul_(t.eG);
    blas::batched_solve_triangular(t.A.flatten(0, 1), rhs.flatten(0, 1), /*upper=*/false, /*unit_diagonal=*/true);
    t.uy = rhs;
  }
  t.intra = blas::batched_matmul(t.q, mT(t.k)).mul_(t.M);
  const at::Tensor G_last = G.narrow(-1, L - 1, 1);  // [K, B, 1]
  t.to_end = (G_last - G).exp_().unsqueeze(-1);
  t.kd = t.k * t.to_end;
  t.d = G_last.exp().unsqueeze(-1);
  return t;
}

// x [N,P,H,F] -> [K, N H, L, F] (a copy), and back: [K, N H, L, D] -> [N, P, H, D].
at::Tensor to_chunks(const at::Tensor& x, int64_t L) {
  const int64_t N = x.size(0), K = x.size(1) / L, H = x.size(2), F = x.size(3);
  return x.reshape({N, K, L, H, F}).permute({1, 0, 3, 2, 4}).reshape({K, N * H, L, F});
}
at::Tensor from_chunks(const at::Tensor& c, int64_t N) {
  const int64_t K = c.size(0), H = c.size(1) / N, L = c.size(2), D = c.size(3);
  return c.view({K, N, H, L, D}).permute({1, 0, 3, 2, 4}).reshape({N, K * L, H, D});
}

struct DeltaForward {
  at::Tensor xc;      // [K, N H, L, F]: the inputs in chunks
  at::Tensor uy;      // [K, N H, L, Dv + Dk]: [U | Y]
  at::Tensor o;       // [N, P, H, Dv]
  at::Tensor states;  // [K, N H, Dk, Dv]: the state entering each chunk
  at::Tensor w;       // [K, N H, L, Dv]
  at::Tensor last;    // [N, H, Dk, Dv]: the state after the last chunk
};

DeltaForward delta_forward(const at::Tensor& x, int64_t L, int64_t Dk, int64_t Dv) {
  const int64_t N = x.size(0), H = x.size(2), K = x.size(1) / L, B = N * H;
  DeltaForward f;
  f.xc = to_chunks(x, L);
  const ChunkTerms t = chunk_terms(f.xc, Dk, Dv);
  f.uy = t.uy;
  const at::Tensor U = t.uy.narrow(-1, 0, Dv), Y = t.uy.narrow(-1, Dv, Dk);
  f.states = at::empty({K, B, Dk, Dv}, x.options());
  f.w = at::empty({K, B, L, Dv}, x.options());
  at::Tensor S = at::zeros({B, Dk, Dv}, x.options());
  for (int64_t c = 0; c < K; ++c) {
    f.states[c].copy_(S);
    at::Tensor w = f.w[c];
    w.copy_(U[c]);
    if (c > 0) blas::batched_gemm(w, Y[c], S, /*alpha=*/-1, /*beta=*/1);  // S is still zero at c = 0
    blas::batched_gemm(S.mul_(t.d[c]), mT(t.kd[c]), w, /*alpha=*/1, /*beta=*/1);
  }
  f.last = S.view({N, H, Dk, Dv});
  at::Tensor o = blas::batched_matmul(t.intra, f.w);
  blas::batched_gemm(o.flatten(0, 1), (t.q * t.eG).flatten(0, 1), f.states.flatten(0, 1), /*alpha=*/1, /*beta=*/1);
  f.o = from_chunks(o, N);
  return f;
}

// The rule with its own backward: it keeps the inputs in chunks, [U | Y], the states
// entering each chunk and w, and recomputes the chunks' [L, L] terms in backward (autograd
// kept five [L, L] and a dozen [L, D] tensors per chunk and ran many more, smaller ops).
struct DeltaRule : torch::autograd::Function<DeltaRule> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                int64_t L, int64_t Dk, int64_t Dv) {
    DeltaForward f = delta_forward(x, L, Dk, Dv);
    ctx->save_for_backward({f.xc, f.uy, f.states, f.w});
    ctx->saved_data["N"] = x.size(0);
    ctx->saved_data["L"] = L;
    ctx->saved_data["Dk"] = Dk;
    ctx->saved_data["Dv"] = Dv;
    ctx->mark_non_differentiable({f.last});
    return {f.o, f.last};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::NoGradGuard no_grad;
    auto saved = ctx->get_saved_variables();
    const at::Tensor &xc = saved[0], &states = saved[2], &w = saved[3];
    const int64_t L = ctx->saved_data["L"].toInt(), Dk = ctx->saved_data["Dk"].toInt(),
                  Dv = ctx->saved_data["Dv"].toInt(), N = ctx->saved_data["N"].toInt();
    const int64_t K = xc.size(0), H = xc.size(1) / N, F = xc.size(3);
    if (!grads[0].defined()) return {at::zeros({N, K * L, H, F}, xc.options()), at::Tensor(), at::Tensor(), at::Tensor()};
    // Each term is released as soon as its last use is behind: the backward's peak is a few
    // [L, L] and [L, D] tensors per chunk at a time.
    ChunkTerms t = chunk_terms(xc, Dk, Dv, saved[1]);
    const at::Tensor dO = to_chunks(grads[0].to(xc.scalar_type()), L);  // [K, B, L, Dv]
    at::Tensor qg = t.q * t.eG;

    // The chunks in reverse: dS is the gradient of the state leaving chunk c.
    at::Tensor from_o = blas::batched_matmul(mT(t.intra), dO);  // [K, B, L, Dv]
    at::Tensor to_state = blas::batched_matmul(mT(qg), dO);     // [K, B, Dk, Dv]
    at::Tensor dw = at::empty_like(w), dS_after = at::empty_like(states);
    {
      const at::Tensor Y = t.uy.narrow(-1, Dv, Dk);
      at::Tensor dS = at::zeros_like(states[0]);
      for (int64_t c = K - 1; c >= 0; --c) {
        dS_after[c].copy_(dS);
        at::Tensor dw_c = dw[c];
        dw_c.copy_(from_o[c]);
        blas::batched_gemm(dw_c, t.kd[c], dS, /*alpha=*/1, /*beta=*/1);
        blas::batched_gemm(dS.mul_(t.d[c]).add_(to_state[c]), mT(Y[c]), dw_c, /*alpha=*/-1, /*beta=*/1);
      }
    }
    from_o.reset();
    to_state.reset();

    // intra = q k^T * M. E collects dM * M, what the decays in M pass on to G.
    at::Tensor d_intra = blas::batched_matmul(dO, mT(w));  // [K, B, L, L]
    at::Tensor E = d_intra * t.intra;
    t.intra.reset();
    d_intra.mul_(t.M);  // now the gradient of q k^T
    at::Tensor dq = blas::batched_matmul(d_intra, t.k);
    at::Tensor dk = blas::batched_matmul(mT(d_intra), t.q);
    d_intra.reset();
    // q e^G, k e^{G_last - G} and e^{G_last}.
    {
      const at::Tensor d_qg = blas::batched_matmul(dO, mT(states));  // [K, B, L, Dk]
      dq.addcmul_(d_qg, t.eG);
      qg.mul_(d_qg);
    }
    at::Tensor dG = qg.sum(-1);  // [K, B, L]
    qg.reset();
    at::Tensor through_kd;
    {
      const at::Tensor d_kd = blas::batched_matmul(w, mT(dS_after));  // [K, B, L, Dk]
      dk.addcmul_(d_kd, t.to_end);
      through_kd = (d_kd * t.kd).sum(-1);  // [K, B, L]
    }
    const at::Tensor d_d = (states * dS_after).sum({-1, -2});  // [K, B]
    dS_after.reset();

    // Through the solve: rhs = T Z, so d rhs = T^-T dZ and dT = -(d rhs) Z^T.
    at::Tensor d_rhs;
    {
      at::Tensor dZ = at::cat({dw, blas::batched_matmul(dw, mT(states)).neg_()}, -1);  // [dU | dY]
      dw.reset();
      blas::batched_solve_triangular(mT(t.KKM * t.beta).flatten(0, 1), dZ.flatten(0, 1), /*upper=*/true,
                                     /*unit_diagonal=*/true);
      d_rhs = dZ;
    }
    const at::Tensor below = at::ones({L, L}, xc.options().dtype(at::kBool)).tril(-1);
    at::Tensor dA = blas::batched_matmul(d_rhs, mT(t.uy)).neg_().mul_(below);  // [K, B, L, L]
    t.uy.reset();
    // A = beta k k^T * M, row i scaled by beta_i.
    at::Tensor dbeta;
    {
      const at::Tensor dA_KKM = dA * t.KKM;
      t.KKM.reset();
      dbeta = dA_KKM.sum(-1, true);  // [K, B, L, 1]
      E.addcmul_(dA_KKM, t.beta);
    }
    dA.mul_(t.M).mul_(t.beta);  // now the gradient of k k^T
    dk.add_(blas::batched_matmul(dA + mT(dA), t.k));
    dA.reset();
    // The solve's right side [beta v | beta e^G k].
    const at::Tensor d_bv = d_rhs.narrow(-1, 0, Dv), d_bek = d_rhs.narrow(-1, Dv, Dk);
    at::Tensor dv = d_bv * t.beta;
    dbeta.add_((d_bv * t.v).sum(-1, true));
    {
      const at::Tensor beta_eG = t.beta * t.eG;  // [K, B, L, 1]
      dk.addcmul_(d_bek, beta_eG);
      const at::Tensor d_bek_k = (d_bek * t.k).sum(-1, true);  // [K, B, L, 1]
      dbeta.addcmul_(d_bek_k, t.eG);
      dG.add_((d_bek_k * beta_eG).squeeze(-1));
    }
    d_rhs.reset();

    // G: through M (+ on row i, - on column j), then g, whose running sum G is.
    dG.add_(E.sum(-1)).sub_(E.sum(-2)).sub_(through_kd);
    dG.narrow(-1, L - 1, 1).add_(through_kd.sum(-1, true) + (d_d * t.d.squeeze(-1).squeeze(-1)).unsqueeze(-1));
    E.reset();
    const at::Tensor dg = dG.flip(-1).cumsum(-1).flip(-1).unsqueeze(-1);

    // Each part straight into its place in [N, P, H, F].
    at::Tensor dx = at::empty({N, K * L, H, F}, xc.options());
    int64_t at_feature = 0;
    for (const at::Tensor* part : std::array<const at::Tensor*, 5>{&dq, &dk, &dv, &dg, &dbeta}) {
      const int64_t D = part->size(-1);
      dx.view({N, K, L, H, F}).narrow(-1, at_feature, D).copy_(part->view({K, N, H, L, D}).permute({1, 0, 3, 2, 4}));
      at_feature += D;
    }
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// x [N,P,H,F] = [q | k | v | g | beta] along F -> o [N,P,H,Dv]; P a multiple of L. With
// final_state non-null it receives the state after the last position [N,H,Dk,Dv] (padding
// leaves the state as it was).
at::Tensor chunked_delta_rule(const at::Tensor& x, int64_t L, int64_t Dk, int64_t Dv, at::Tensor* final_state) {
  const int64_t P = x.size(1), F = x.size(3);
  GLINT_ASSERT(P % L == 0 && F == 2 * Dk + Dv + 2, "chunked rule over P=", P, ", L=", L, ", F=", F);
  at::Tensor o, last;
  if (at::GradMode::is_enabled() && x.requires_grad()) {
    torch::autograd::variable_list out = DeltaRule::apply(x, L, Dk, Dv);
    o = out[0];
    last = out[1];
  } else {
    DeltaForward f = delta_forward(x, L, Dk, Dv);
    o = f.o;
    last = f.last;
  }
  if (final_state) *final_state = last;
  return o;
}

// The chunk length and padded length for one sequence: sequences shorter than `chunk` run as
// one chunk of the next power of two, so short sequences do not pay for a full chunk.
std::pair<int64_t, int64_t> chunk_shape(int64_t length, int64_t chunk) {
  int64_t L = chunk;
  if (length < chunk) {
    L = 1;
    while (L < length) L *= 2;
    L = std::min(L, chunk);
  }
  return {L, (length + L - 1) / L * L};
}

}  // namespace

namespace {
// Bytes per token of sequences of `seq_len` tokens in the compute type of `dtype_bytes`
// inputs, padding to whole chunks counted.
// per_head(l, dk, dv) gives the elements per padded token and head for chunk length l.
double per_token_bytes(int64_t seq_len, int64_t Hv, int64_t Dk, int64_t Dv, int64_t dtype_bytes,
                       const std::function<double(double l, double dk, double dv)>& per_head) {
  const auto [L, P] = chunk_shape(std::max<int64_t>(1, seq_len), 64);
  const double cb = dtype_bytes == 8 ? 8 : 4;
  return cb * per_head(double(L), double(Dk), double(Dv)) * double(Hv) * double(P) /
         double(std::max<int64_t>(1, seq_len));
}
}  // namespace

double gated_delta_rule_kept_bytes(int64_t seq_len, int64_t Hv, int64_t Dk, int64_t Dv, int64_t dtype_bytes) {
  // The inputs in chunks (2 Dk + Dv + 2), [U | Y], w and the state entering each chunk.
  return per_token_bytes(seq_len, Hv, Dk, Dv, dtype_bytes, [](double l, double dk, double dv) {
    return (2 * dk + dv + 2) + (dv + dk) + dv + dk * dv / l;
  });
}

double gated_delta_rule_working_bytes(int64_t seq_len, int64_t Hv, int64_t Dk, int64_t Dv, int64_t dtype_bytes) {
  // At its largest (measured 0.86-0.98 of this): M, T and the [L, L] gradients with their
  // temporaries beside the gradients of q, k and the solve's right side, and the states'
  // gradients from the reverse loop.
  return per_token_bytes(seq_len, Hv, Dk, Dv, dtype_bytes, [](double l, double dk, double dv) {
    return 5.5 * l + 3 * dk + dv + 2 * dk * dv / l;
  });
}

double gated_delta_rule_forward_bytes(int64_t seq_len, int64_t Hv, int64_t Dk, int64_t Dv, int64_t dtype_bytes) {
  // At its largest (measured 0.96-1.11 of this): the inputs in chunks, the solve's right
  // side and [U | Y], M, T and q k^T * M, k e^{G_last - G}, q e^G, w, the states and the
  // output with its copy back in [N, P, H, Dv].
  return per_token_bytes(seq_len, Hv, Dk, Dv, dtype_bytes, [](double l, double dk, double dv) {
    return (2 * dk + dv + 2) + 2 * (dv + dk) + 3 * l + 3 * dk + 3 * dv + dk * dv / l;
  });
}

at::Tensor gated_delta_rule(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                            const at::Tensor& beta, const SequenceLayout& layout, int64_t chunk,
                            at::Tensor* final_state) {
  GLINT_CHECK(q.dim() == 4, "gated_delta_rule: q must be [B,S,Hv,Dk], got ", q.sizes());
  const int64_t B = q.size(0), S = q.size(1), H = q.size(2), Dk = q.size(3);
  GLINT_CHECK(k.sizes() == q.sizes(), "gated_delta_rule: k is ", k.sizes(), " but q is ", q.sizes());
  GLINT_CHECK(v.dim() == 4 && v.size(0) == B && v.size(1) == S && v.size(2) == H, "gated_delta_rule: v must be [", B,
              ", ", S, ", ", H, ", Dv], got ", v.sizes());
  GLINT_CHECK(g.dim() == 3 && g.size(0) == B && g.size(1) == S && g.size(2) == H, "gated_delta_rule: g must be [", B,
              ", ", S, ", ", H, "], got ", g.sizes());
  GLINT_CHECK(beta.sizes() == g.sizes(), "gated_delta_rule: beta is ", beta.sizes(), " but g is ", g.sizes());
  GLINT_CHECK(B == layout.rows && S == layout.seq_len, "gated_delta_rule: inputs are [", B, ", ", S,
              ", ...] but the layout is [", layout.rows, ", ", layout.seq_len, "]");
  GLINT_CHECK(chunk >= 1, "gated_delta_rule: chunk must be >= 1, got ", chunk);
  const int64_t Dv = v.size(3);
  const auto compute = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  profile::Scope region("delta rule");

  // One tensor carries all five inputs, so each split, pad and concatenation below runs once
  // instead of five times.
  at::Tensor packed = at::cat(
      {q.to(compute), k.to(compute), v.to(compute), g.to(compute).unsqueeze(-1), beta.to(compute).unsqueeze(-1)},
      -1);  // [B,S,Hv,F]

  // Cut every block of rows into its sequences (split_with_sizes: one backward node per
  // block, where narrow would scatter into a zero-filled copy per sequence).
  struct Piece {
    size_t block;
    int64_t length;
    at::Tensor in;   // [b, length, Hv, F]
    at::Tensor out;  // [b, length, Hv, Dv]; undefined for padding
    at::Tensor state;  // [b, Hv, Dk, Dv] after its last token, when final_state is asked for
  };
  std::vector<std::vector<Span>> blocks = spans_per_block(layout);
  std::vector<at::Tensor> block_rows = rows_per_block(packed, layout);
  std::vector<Piece> pieces;
  // (chunk length, padded length) -> pieces batched into one chunked computation.
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> batches;
  for (size_t b = 0; b < blocks.size(); ++b) {
    std::vector<int64_t> lengths;
    for (const Span& span : blocks[b]) lengths.push_back(span.length);
    std::vector<at::Tensor> cut =
        lengths.size() == 1 ? std::vector<at::Tensor>{block_rows[b]} : block_rows[b].split_with_sizes(lengths, 1);
    for (size_t i = 0; i < cut.size(); ++i) {
      pieces.push_back({b, lengths[i], cut[i], at::Tensor(), at::Tensor()});
      if (!blocks[b][i].padding && lengths[i] > 0) batches[chunk_shape(lengths[i], chunk)].push_back(pieces.size() - 1);
    }
  }

  for (const auto& [shape, members] : batches) {
    const auto [L, P] = shape;
    std::vector<at::Tensor> inputs;
    std::vector<int64_t> counts;
    for (size_t i : members) {
      const Piece& piece = pieces[i];
      inputs.push_back(piece.length == P ? piece.in : at::constant_pad_nd(piece.in, {0, 0, 0, 0, 0, P - piece.length}));
      counts.push_back(piece.in.size(0));
    }
    at::Tensor state;
    at::Tensor out = chunked_delta_rule(inputs.size() == 1 ? inputs[0] : at::cat(inputs, 0), L, Dk, Dv,
                                        final_state ? &state : nullptr);
    std::vector<at::Tensor> outs = members.size() == 1 ? std::vector<at::Tensor>{out} : out.split_with_sizes(counts, 0);
    std::vector<at::Tensor> states;
    if (final_state) states = members.size() == 1 ? std::vector<at::Tensor>{state} : state.split_with_sizes(counts, 0);
    for (size_t j = 0; j < members.size(); ++j) {
      Piece& piece = pieces[members[j]];
      piece.out = piece.length == P ? outs[j] : outs[j].split_with_sizes({piece.length, P - piece.length}, 1)[0];
      if (final_state) piece.state = states[j];
    }
  }

  std::vector<std::vector<at::Tensor>> per_block(blocks.size());
  for (Piece& piece : pieces) {
    if (!piece.out.defined()) piece.out = at::zeros({piece.in.size(0), piece.length, H, Dv}, packed.options());
    per_block[piece.block].push_back(piece.out);
  }
  std::vector<at::Tensor> rows;
  for (auto& parts : per_block) rows.push_back(parts.size() == 1 ? parts[0] : at::cat(parts, 1));
  at::Tensor o = rows.size() == 1 ? rows[0] : at::cat(rows, 0);  // [B,S,Hv,Dv]
  if (final_state) {  // each block's last sequence's state
    std::vector<at::Tensor> last(blocks.size());
    for (const Piece& piece : pieces)
      if (piece.state.defined()) last[piece.block] = piece.state;
    for (size_t b = 0; b < blocks.size(); ++b)
      if (!last[b].defined()) last[b] = at::zeros({block_rows[b].size(0), H, Dk, Dv}, packed.options());
    *final_state = last.size() == 1 ? last[0] : at::cat(last, 0);  // [B,Hv,Dk,Dv]
  }
  return o.to(q.scalar_type());
}

}  // namespace glint
