// Legend: B rows, S positions, Hv value heads, Dk key dim, Dv value dim, C conv channels,
// W kernel width. Inside the chunked rule: N sequences batched together, P their padded
// length, L the chunk length, K = P / L chunks, F = 2 Dk + Dv + 2 packed input features.
#include "model/qwen3_5/gated_delta.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "core/blas.h"
#include "core/cpu_clones.h"
#include "core/cpu_kernels.h"
#include "core/cpu_math.h"
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

struct DeltaForward {
  at::Tensor uy;      // [K, B, L, Dv + Dk]: [U | Y]
  at::Tensor o;       // [K, B, L, Dv]
  at::Tensor states;  // [K, B, Dk, Dv]: the state entering each chunk
  at::Tensor w;       // [K, B, L, Dv]
  at::Tensor last;    // [B, Dk, Dv]: the state after the last chunk
};

// xc [K, B, L, F]: the chunks of B = N H (sequence, head) pairs.
DeltaForward delta_forward(const at::Tensor& xc, int64_t Dk, int64_t Dv) {
  const int64_t K = xc.size(0), B = xc.size(1), L = xc.size(2);
  const at::TensorOptions opts = xc.options();
  DeltaForward f;
  const ChunkTerms t = chunk_terms(xc, Dk, Dv);
  f.uy = t.uy;
  const at::Tensor U = t.uy.narrow(-1, 0, Dv), Y = t.uy.narrow(-1, Dv, Dk);
  f.states = at::empty({K, B, Dk, Dv}, opts);
  f.w = at::empty({K, B, L, Dv}, opts);
  at::Tensor S = at::zeros({B, Dk, Dv}, opts);
  for (int64_t c = 0; c < K; ++c) {
    f.states[c].copy_(S);
    at::Tensor w = f.w[c];
    w.copy_(U[c]);
    if (c > 0) blas::batched_gemm(w, Y[c], S, /*alpha=*/-1, /*beta=*/1);  // S is still zero at c = 0
    blas::batched_gemm(S.mul_(t.d[c]), mT(t.kd[c]), w, /*alpha=*/1, /*beta=*/1);
  }
  f.last = S;
  f.o = blas::batched_matmul(t.intra, f.w);
  blas::batched_gemm(f.o.flatten(0, 1), (t.q * t.eG).flatten(0, 1), f.states.flatten(0, 1), /*alpha=*/1, /*beta=*/1);
  return f;
}

// The rule with its own backward: it keeps the inputs in chunks, [U | Y], the states
// entering each chunk and w, and recomputes the chunks' [L, L] terms in backward (autograd
// kept five [L, L] and a dozen [L, D] tensors per chunk and ran many more, smaller ops).
struct DeltaRule : torch::autograd::Function<DeltaRule> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& xc,
                                                int64_t Dk, int64_t Dv) {
    DeltaForward f = delta_forward(xc, Dk, Dv);
    ctx->save_for_backward({xc, f.uy, f.states, f.w});
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
    const int64_t Dk = ctx->saved_data["Dk"].toInt(), Dv = ctx->saved_data["Dv"].toInt();
    const int64_t K = xc.size(0), L = xc.size(2);
    if (!grads[0].defined()) return {at::zeros_like(xc), at::Tensor(), at::Tensor()};
    // Each term is released as soon as its last use is behind: the backward's peak is a few
    // [L, L] and [L, D] tensors per chunk at a time.
    ChunkTerms t = chunk_terms(xc, Dk, Dv, saved[1]);
    const at::Tensor dO = grads[0].to(xc.scalar_type()).contiguous();  // [K, B, L, Dv]
    at::Tensor qg = t.q * t.eG;

    // The chunks in reverse: dS is the gradient of the state leaving chunk c.
    at::Tensor from_o = blas::batched_matmul(mT(t.intra), dO);  // [K, B, L, Dv]
    at::Tensor to_state = blas::batched_matmul(mT(qg), dO);     // [K, B, Dk, Dv]
    // The solve's right side's gradient [dU | dY] is formed in place: dU = dw, dY = -dw S^T.
    at::Tensor dZ = at::empty({K, w.size(1), L, Dv + Dk}, w.options());
    at::Tensor dw = dZ.narrow(-1, 0, Dv), dS_after = at::empty_like(states);
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
    // Each input's gradient is formed in its place in dx [K, B, L, F].
    const at::Tensor dx = at::empty(xc.sizes(), xc.options());  // contiguous, whatever xc is
    at::Tensor dq = dx.narrow(-1, 0, Dk), dk = dx.narrow(-1, Dk, Dk);
    blas::batched_gemm(dq.flatten(0, 1), d_intra.flatten(0, 1), t.k.flatten(0, 1));
    blas::batched_gemm(dk.flatten(0, 1), mT(d_intra).flatten(0, 1), t.q.flatten(0, 1));
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
      blas::batched_gemm(dZ.narrow(-1, Dv, Dk).flatten(0, 1), dw.flatten(0, 1), mT(states).flatten(0, 1),
                         /*alpha=*/-1);
      dw.reset();
      blas::batched_solve_triangular(mT(t.KKM * t.beta).flatten(0, 1), dZ.flatten(0, 1), /*upper=*/true,
                                     /*unit_diagonal=*/true);
      d_rhs = std::move(dZ);
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
    {
      at::Tensor dv = dx.narrow(-1, 2 * Dk, Dv);
      at::mul_out(dv, d_bv, t.beta);
    }
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
    dx.narrow(-1, 2 * Dk + Dv, 1).copy_(dG.flip(-1).cumsum(-1).flip(-1).unsqueeze(-1));
    dx.narrow(-1, 2 * Dk + Dv + 1, 1).copy_(dbeta);

    return {dx, at::Tensor(), at::Tensor()};
  }
};

// xc [K, B, L, F] -> o [K, B, L, Dv], and with last non-null the state after the last
// chunk [B, Dk, Dv].
at::Tensor chunked_delta_rule(const at::Tensor& xc, int64_t Dk, int64_t Dv, at::Tensor* last) {
  GLINT_ASSERT(xc.dim() == 4 && xc.size(3) == 2 * Dk + Dv + 2, "chunked rule over ", xc.sizes());
  at::Tensor o, state;
  if (at::GradMode::is_enabled() && xc.requires_grad()) {
    torch::autograd::variable_list out = DeltaRule::apply(xc, Dk, Dv);
    o = out[0];
    state = out[1];
  } else {
    DeltaForward f = delta_forward(xc, Dk, Dv);
    o = f.o;
    state = f.last;
  }
  if (last) *last = state;
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

// Where every token of the [B, S] batch sits in the chunked computations. The sequences of
// one (chunk length, padded length) run as one batch of N sequences, its chunks laid out
// [K, N H, L, F]: slot (k N + n) L + l of a batch is position k L + l of its sequence n, for
// each head h at row (k N + n) H + h of the [K N H, L] rows.
struct ChunkBatch {
  int64_t L = 0, P = 0, N = 0;
  at::Tensor slot_token;  // [K N L] int64, CPU: the token b S + s in each slot, or -1 (padding)
};
struct ChunkPlan {
  std::vector<ChunkBatch> batches;
  at::Tensor token_slot;  // [B S, 2] int64, CPU: (batch, slot), or (-1, -1) for a padding token
  std::vector<std::pair<int64_t, int64_t>> row_last;  // per row: (batch, n) of its last sequence, or (-1, -1)
};

ChunkPlan chunk_plan(const SequenceLayout& layout, int64_t chunk) {
  const int64_t S = layout.seq_len;
  struct Piece {
    int64_t row0, rows, start, length;
    int64_t batch = -1, n0 = 0;
  };
  std::vector<Piece> pieces;  // in row order
  const std::vector<std::vector<Span>> blocks = spans_per_block(layout);
  for (size_t b = 0; b < blocks.size(); ++b)
    for (const Span& span : blocks[b])
      if (!span.padding && span.length > 0)
        pieces.push_back({layout.rows_alike ? 0 : int64_t(b), layout.rows_alike ? layout.rows : 1, span.start,
                          span.length});
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> shapes;
  for (size_t i = 0; i < pieces.size(); ++i) shapes[chunk_shape(pieces[i].length, chunk)].push_back(i);

  ChunkPlan plan;
  plan.token_slot = at::full({layout.rows * S, 2}, -1, at::kLong);
  int64_t* token_slot = plan.token_slot.data_ptr<int64_t>();
  for (const auto& [shape, members] : shapes) {
    ChunkBatch batch;
    std::tie(batch.L, batch.P) = shape;
    const int64_t index = int64_t(plan.batches.size()), K = batch.P / batch.L;
    for (size_t i : members) {
      pieces[i].batch = index;
      pieces[i].n0 = batch.N;
      batch.N += pieces[i].rows;
    }
    batch.slot_token = at::full({K * batch.N * batch.L}, -1, at::kLong);
    int64_t* slot_token = batch.slot_token.data_ptr<int64_t>();
    for (size_t i : members) {
      const Piece& piece = pieces[i];
      for (int64_t r = 0; r < piece.rows; ++r)
        for (int64_t p = 0; p < piece.length; ++p) {
          const int64_t slot = ((p / batch.L) * batch.N + piece.n0 + r) * batch.L + p % batch.L;
          const int64_t token = (piece.row0 + r) * S + piece.start + p;
          slot_token[slot] = token;
          token_slot[2 * token] = index;
          token_slot[2 * token + 1] = slot;
        }
    }
    plan.batches.push_back(std::move(batch));
  }
  plan.row_last.assign(size_t(layout.rows), {-1, -1});
  for (const Piece& piece : pieces)
    for (int64_t r = 0; r < piece.rows; ++r) plan.row_last[size_t(piece.row0 + r)] = {piece.batch, piece.n0 + r};
  return plan;
}

// The plan's tensors and shapes in a custom function's saved data, for its backward.
void save_plan(torch::autograd::AutogradContext* ctx, const ChunkPlan& plan) {
  std::vector<at::Tensor> slots;
  std::vector<int64_t> shapes;
  for (const ChunkBatch& batch : plan.batches) {
    slots.push_back(batch.slot_token);
    shapes.insert(shapes.end(), {batch.L, batch.P, batch.N});
  }
  ctx->saved_data["slots"] = slots;
  ctx->saved_data["shapes"] = shapes;
  ctx->saved_data["token_slot"] = plan.token_slot;
}
ChunkPlan saved_plan(torch::autograd::AutogradContext* ctx) {
  ChunkPlan plan;
  const std::vector<at::Tensor> slots = ctx->saved_data["slots"].toTensorVector();
  const std::vector<int64_t> shapes = ctx->saved_data["shapes"].toIntVector();
  for (size_t i = 0; i < slots.size(); ++i)
    plan.batches.push_back({shapes[3 * i], shapes[3 * i + 1], shapes[3 * i + 2], slots[i]});
  plan.token_slot = ctx->saved_data["token_slot"].toTensor();
  return plan;
}

// The shapes the packing works with: q, k [B, S, Hk, Dk], v [B, S, H, Dv], g, beta
// [B, S, H]; value head h reads key head h / (H / Hk).
struct PackDims {
  int64_t S, H, Hk, Dk, Dv;
  bool normalize;  // q and k L2-normalised in the packing, q scaled by Dk^-1/2
  int64_t F() const { return 2 * Dk + Dv + 2; }
};

constexpr double kQkNormEps = 1e-6;

// A [.., S, heads, D] tensor's element (b, s, h, 0), read with its strides (unit stride
// along D).
template <typename T>
struct HeadRows {
  const T* data;
  int64_t sb, ss, sh, S;
  HeadRows(const at::Tensor& t, int64_t S_)  // none where t is undefined
      : data(t.defined() ? t.data_ptr<T>() : nullptr),
        sb(t.defined() ? t.stride(0) : 0),
        ss(t.defined() ? t.stride(1) : 0),
        sh(t.defined() ? t.stride(2) : 0),
        S(S_) {}
  const T* at(int64_t token, int64_t h) const { return data + (token / S) * sb + (token % S) * ss + h * sh; }
};

template <typename T>
T inverse_norm(const T* x, int64_t D) {
  return T(1) / std::sqrt(dot_row(x, x, D) + T(kQkNormEps));
}

// The slots of one batch written from the inputs: [q | k | v | g | beta] per head, zeros
// in padding slots.
template <typename T>
void pack_batch_cpu(const std::array<at::Tensor, 5>& in, const ChunkBatch& batch, const PackDims& d, T* xc) {
  const HeadRows<T> q(in[0], d.S), k(in[1], d.S), v(in[2], d.S);
  const at::Tensor &g = in[3], &beta = in[4];
  const T* gp = g.data_ptr<T>();
  const T* bp = beta.data_ptr<T>();
  const int64_t F = d.F(), L = batch.L, r = d.H / d.Hk;
  const T q_scale = d.normalize ? T(1 / std::sqrt(double(d.Dk))) : T(1);
  const int64_t* slot_token = batch.slot_token.data_ptr<int64_t>();
  at::parallel_for(0, batch.slot_token.numel(), 8, [&](int64_t begin, int64_t end) {
    for (int64_t slot = begin; slot < end; ++slot) {
      const int64_t token = slot_token[slot], kn = slot / L, l = slot % L;
      T q_factor = 1, k_factor = 1;  // key head h / r's, for its r value heads
      for (int64_t h = 0; h < d.H; ++h) {
        T* dst = xc + ((kn * d.H + h) * L + l) * F;
        if (token < 0) {
          std::fill(dst, dst + F, T(0));
          continue;
        }
        const T* qs = q.at(token, h / r);
        const T* ks = k.at(token, h / r);
        if (d.normalize && h % r == 0) {
          q_factor = q_scale * inverse_norm(qs, d.Dk);
          k_factor = inverse_norm(ks, d.Dk);
        }
        scaled_row(dst, qs, q_factor, d.Dk, false);
        scaled_row(dst + d.Dk, ks, k_factor, d.Dk, false);
        std::copy(v.at(token, h), v.at(token, h) + d.Dv, dst + 2 * d.Dk);
        const int64_t b = token / d.S, s = token % d.S;
        dst[2 * d.Dk + d.Dv] = gp[b * g.stride(0) + s * g.stride(1) + h * g.stride(2)];
        dst[2 * d.Dk + d.Dv + 1] = bp[b * beta.stride(0) + s * beta.stride(1) + h * beta.stride(2)];
      }
    }
  });
}

// dy <- the gradient of x through y = c x / sqrt(|x|^2 + eps): c r (dy - x (x . dy) r^2).
template <typename T>
GLINT_CPU_CLONES void normalized_backward(const T* x, T* dy, int64_t D, T c) {
  const T r = inverse_norm(x, D);
  const T along = dot_row(x, dy, D) * r * r;
#ifdef _OPENMP
#pragma omp simd
#endif
  for (int64_t i = 0; i < D; ++i) dy[i] = c * r * (dy[i] - x[i] * along);
}

// The inputs' gradients from the batches' (each undefined where no gradient came), token
// by token: a key head sums its value heads' gradients, then goes back through the norm.
template <typename T>
void unpack_input_grads_cpu(const std::vector<at::Tensor>& d_xc, const ChunkPlan& plan, const PackDims& d,
                            const at::Tensor& q, const at::Tensor& k, const std::array<at::Tensor, 5>& out) {
  const int64_t tokens = plan.token_slot.size(0), F = d.F(), r = d.H / d.Hk;
  const int64_t* token_slot = plan.token_slot.data_ptr<int64_t>();
  T *dq = out[0].data_ptr<T>(), *dk = out[1].data_ptr<T>(), *dv = out[2].data_ptr<T>();
  T *dg = out[3].data_ptr<T>(), *dbeta = out[4].data_ptr<T>();
  const HeadRows<T> qs(q, d.S), ks(k, d.S);
  const T q_scale = d.normalize ? T(1 / std::sqrt(double(d.Dk))) : T(1);
  at::parallel_for(0, tokens, 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      T* tq = dq + t * d.Hk * d.Dk;
      T* tk = dk + t * d.Hk * d.Dk;
      T* tv = dv + t * d.H * d.Dv;
      const int64_t batch = token_slot[2 * t], slot = token_slot[2 * t + 1];
      if (batch < 0 || !d_xc[size_t(batch)].defined()) {
        std::fill(tq, tq + d.Hk * d.Dk, T(0));
        std::fill(tk, tk + d.Hk * d.Dk, T(0));
        std::fill(tv, tv + d.H * d.Dv, T(0));
        std::fill(dg + t * d.H, dg + (t + 1) * d.H, T(0));
        std::fill(dbeta + t * d.H, dbeta + (t + 1) * d.H, T(0));
        continue;
      }
      const int64_t L = plan.batches[size_t(batch)].L, kn = slot / L, l = slot % L;
      const T* grad = d_xc[size_t(batch)].data_ptr<T>();
      for (int64_t h = 0; h < d.H; ++h) {
        const T* src = grad + ((kn * d.H + h) * L + l) * F;
        const int64_t j = h / r;
        scaled_row(tq + j * d.Dk, src, T(1), d.Dk, h % r != 0);
        scaled_row(tk + j * d.Dk, src + d.Dk, T(1), d.Dk, h % r != 0);
        std::copy(src + 2 * d.Dk, src + 2 * d.Dk + d.Dv, tv + h * d.Dv);
        dg[t * d.H + h] = src[2 * d.Dk + d.Dv];
        dbeta[t * d.H + h] = src[2 * d.Dk + d.Dv + 1];
      }
      if (d.normalize)
        for (int64_t j = 0; j < d.Hk; ++j) {
          normalized_backward(qs.at(t, j), tq + j * d.Dk, d.Dk, q_scale);
          normalized_backward(ks.at(t, j), tk + j * d.Dk, d.Dk, T(1));
        }
    }
  });
}

// Row reads and writes between the batches' [K, N H, L, D] chunk rows and the tokens'
// [B, S, H, D]: to_tokens gathers every token's rows (zeros for padding tokens), to_chunks
// every slot's (zeros for padding slots).
template <typename T>
void chunk_rows_to_tokens_cpu(const std::vector<at::Tensor>& chunks, const ChunkPlan& plan, int64_t H, int64_t D,
                              T* out) {
  const int64_t* token_slot = plan.token_slot.data_ptr<int64_t>();
  at::parallel_for(0, plan.token_slot.size(0), 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      T* dst = out + t * H * D;
      const int64_t batch = token_slot[2 * t], slot = token_slot[2 * t + 1];
      if (batch < 0 || !chunks[size_t(batch)].defined()) {
        std::fill(dst, dst + H * D, T(0));
        continue;
      }
      const int64_t L = plan.batches[size_t(batch)].L, kn = slot / L, l = slot % L;
      const T* src = chunks[size_t(batch)].data_ptr<T>();
      for (int64_t h = 0; h < H; ++h) std::copy_n(src + ((kn * H + h) * L + l) * D, D, dst + h * D);
    }
  });
}
template <typename T>
void token_rows_to_chunks_cpu(const T* tokens, const ChunkBatch& batch, int64_t H, int64_t D, T* chunks) {
  const int64_t* slot_token = batch.slot_token.data_ptr<int64_t>();
  const int64_t L = batch.L;
  at::parallel_for(0, batch.slot_token.numel(), 16, [&](int64_t begin, int64_t end) {
    for (int64_t slot = begin; slot < end; ++slot) {
      const int64_t token = slot_token[slot], kn = slot / L, l = slot % L;
      for (int64_t h = 0; h < H; ++h) {
        T* dst = chunks + ((kn * H + h) * L + l) * D;
        if (token < 0) std::fill(dst, dst + D, T(0));
        else std::copy_n(tokens + (token * H + h) * D, D, dst);
      }
    }
  });
}

// The five inputs into every batch's chunks, one pass each way on the CPU.
struct PackChunks : torch::autograd::Function<PackChunks> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                                                const at::Tensor& beta, const ChunkPlan* plan, PackDims d) {
    const std::array<at::Tensor, 5> in{q, k, v, g, beta};
    torch::autograd::variable_list xcs;
    for (const ChunkBatch& batch : plan->batches) {
      at::Tensor xc = at::empty({batch.P / batch.L, batch.N * d.H, batch.L, d.F()}, q.options());
      AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "pack_chunks", [&] { pack_batch_cpu<scalar_t>(in, batch, d, xc.data_ptr<scalar_t>()); });
      xcs.push_back(xc);
    }
    if (d.normalize) ctx->save_for_backward({q, k});
    save_plan(ctx, *plan);
    ctx->saved_data["dims"] = std::vector<int64_t>{d.S, d.H, d.Hk, d.Dk, d.Dv, d.normalize};
    ctx->saved_data["batch"] = q.size(0);
    return xcs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::NoGradGuard no_grad;
    const ChunkPlan plan = saved_plan(ctx);
    const std::vector<int64_t> dims = ctx->saved_data["dims"].toIntVector();
    const PackDims d{dims[0], dims[1], dims[2], dims[3], dims[4], dims[5] != 0};
    const int64_t B = ctx->saved_data["batch"].toInt();
    const auto saved = ctx->get_saved_variables();
    at::Tensor q = d.normalize ? saved[0] : at::Tensor(), k = d.normalize ? saved[1] : at::Tensor();
    at::ScalarType dtype = at::kFloat;
    for (at::Tensor& grad : grads)
      if (grad.defined()) {
        grad = grad.contiguous();
        dtype = grad.scalar_type();
      }
    const at::TensorOptions opts = at::TensorOptions().dtype(dtype);
    const std::array<at::Tensor, 5> out{at::empty({B, d.S, d.Hk, d.Dk}, opts), at::empty({B, d.S, d.Hk, d.Dk}, opts),
                                        at::empty({B, d.S, d.H, d.Dv}, opts), at::empty({B, d.S, d.H}, opts),
                                        at::empty({B, d.S, d.H}, opts)};
    AT_DISPATCH_FLOATING_TYPES(dtype, "pack_chunks_backward",
                               [&] { unpack_input_grads_cpu<scalar_t>(grads, plan, d, q, k, out); });
    return {out[0], out[1], out[2], out[3], out[4], at::Tensor(), at::Tensor()};
  }
};

// Every batch's output chunks back into the tokens' [B, S, H, Dv].
struct UnpackChunks : torch::autograd::Function<UnpackChunks> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList chunks, const ChunkPlan* plan,
                            int64_t B, int64_t S, int64_t H) {
    const int64_t D = chunks[0].size(-1);
    at::Tensor o = at::empty({B, S, H, D}, chunks[0].options());
    const std::vector<at::Tensor> parts(chunks.begin(), chunks.end());
    AT_DISPATCH_FLOATING_TYPES(o.scalar_type(), "unpack_chunks",
                               [&] { chunk_rows_to_tokens_cpu<scalar_t>(parts, *plan, H, D, o.data_ptr<scalar_t>()); });
    save_plan(ctx, *plan);
    ctx->saved_data["H"] = H;
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::NoGradGuard no_grad;
    const ChunkPlan plan = saved_plan(ctx);
    const int64_t H = ctx->saved_data["H"].toInt();
    const at::Tensor dO = grads[0].contiguous();
    const int64_t D = dO.size(-1);
    torch::autograd::variable_list out;
    for (const ChunkBatch& batch : plan.batches) {
      at::Tensor dc = at::empty({batch.P / batch.L, batch.N * H, batch.L, D}, dO.options());
      AT_DISPATCH_FLOATING_TYPES(dO.scalar_type(), "unpack_chunks_backward", [&] {
        token_rows_to_chunks_cpu<scalar_t>(dO.data_ptr<scalar_t>(), batch, H, D, dc.data_ptr<scalar_t>());
      });
      out.push_back(dc);
    }
    for (int i = 0; i < 4; ++i) out.push_back(at::Tensor());  // plan, B, S, H
    return out;
  }
};

// The same moves on ATen's operators (other devices, AtenOperatorsOnly): gathers of rows
// by the plan's indices, a zero row standing for padding.
// t [B, S, Hk, D] -> [B, S, heads, D], key head j read by value heads j r .. j r + r - 1.
at::Tensor heads_repeated(const at::Tensor& t, int64_t heads) {
  return heads == t.size(2) ? t : t.repeat_interleave(heads / t.size(2), 2);
}

std::vector<at::Tensor> pack_aten(const std::array<at::Tensor, 5>& in, const ChunkPlan& plan, const PackDims& d) {
  const auto [q, k] = d.normalize ? normalized_qk(in[0], in[1], d.H)
                                   : std::make_pair(heads_repeated(in[0], d.H), heads_repeated(in[1], d.H));
  const int64_t B = q.size(0), F = d.F();
  at::Tensor rows = at::cat({q, k, in[2], in[3].unsqueeze(-1), in[4].unsqueeze(-1)}, -1).view({B * d.S, d.H, F});
  rows = at::cat({at::zeros({1, d.H, F}, rows.options()), rows}, 0);
  std::vector<at::Tensor> xcs;
  for (const ChunkBatch& batch : plan.batches) {
    const int64_t K = batch.P / batch.L;
    const at::Tensor index = (batch.slot_token + 1).to(rows.device());
    xcs.push_back(rows.index_select(0, index).view({K, batch.N, batch.L, d.H, F}).permute({0, 1, 3, 2, 4}).reshape(
        {K, batch.N * d.H, batch.L, F}));
  }
  return xcs;
}
at::Tensor unpack_aten(const std::vector<at::Tensor>& chunks, const ChunkPlan& plan, int64_t B, int64_t S, int64_t H) {
  const int64_t D = chunks[0].size(-1);
  std::vector<at::Tensor> rows{at::zeros({1, H, D}, chunks[0].options())};
  std::vector<int64_t> offsets{1};
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkBatch& batch = plan.batches[i];
    const int64_t K = batch.P / batch.L;
    rows.push_back(chunks[i].view({K, batch.N, H, batch.L, D}).permute({0, 1, 3, 2, 4}).reshape({K * batch.N * batch.L, H, D}));
    offsets.push_back(offsets.back() + K * batch.N * batch.L);
  }
  const at::Tensor token_slot = plan.token_slot;
  at::Tensor index = at::zeros({token_slot.size(0)}, at::kLong);
  const int64_t* ts = token_slot.data_ptr<int64_t>();
  int64_t* ix = index.data_ptr<int64_t>();
  for (int64_t t = 0; t < token_slot.size(0); ++t)
    if (ts[2 * t] >= 0) ix[t] = offsets[size_t(ts[2 * t])] + ts[2 * t + 1];
  return at::cat(rows, 0).index_select(0, index.to(chunks[0].device())).view({B, S, H, D});
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

std::pair<at::Tensor, at::Tensor> normalized_qk(const at::Tensor& q, const at::Tensor& k, int64_t heads) {
  const auto compute = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto l2 = [&](const at::Tensor& t) {
    const at::Tensor tf = t.to(compute);
    return tf * at::rsqrt(tf.pow(2).sum(-1, /*keepdim=*/true) + kQkNormEps);
  };
  return {heads_repeated(l2(q) * (1.0 / std::sqrt(double(q.size(-1)))), heads), heads_repeated(l2(k), heads)};
}

at::Tensor gated_delta_rule(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                            const at::Tensor& beta, const SequenceLayout& layout, int64_t chunk,
                            at::Tensor* final_state, bool normalize_qk) {
  GLINT_CHECK(q.dim() == 4, "gated_delta_rule: q must be [B,S,Hk,Dk], got ", q.sizes());
  const int64_t B = q.size(0), S = q.size(1), Hk = q.size(2), Dk = q.size(3);
  GLINT_CHECK(k.sizes() == q.sizes(), "gated_delta_rule: k is ", k.sizes(), " but q is ", q.sizes());
  GLINT_CHECK(v.dim() == 4 && v.size(0) == B && v.size(1) == S && Hk > 0 && v.size(2) % Hk == 0,
              "gated_delta_rule: v must be [", B, ", ", S, ", H, Dv] with H a multiple of ", Hk, ", got ", v.sizes());
  const int64_t H = v.size(2), Dv = v.size(3);
  GLINT_CHECK(g.dim() == 3 && g.size(0) == B && g.size(1) == S && g.size(2) == H, "gated_delta_rule: g must be [", B,
              ", ", S, ", ", H, "], got ", g.sizes());
  GLINT_CHECK(beta.sizes() == g.sizes(), "gated_delta_rule: beta is ", beta.sizes(), " but g is ", g.sizes());
  GLINT_CHECK(B == layout.rows && S == layout.seq_len, "gated_delta_rule: inputs are [", B, ", ", S,
              ", ...] but the layout is [", layout.rows, ", ", layout.seq_len, "]");
  GLINT_CHECK(chunk >= 1, "gated_delta_rule: chunk must be >= 1, got ", chunk);
  const auto compute = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  profile::Scope region("delta rule");

  const ChunkPlan plan = chunk_plan(layout, chunk);
  const PackDims d{S, H, Hk, Dk, Dv, normalize_qk};
  // The kernels read rows along the last dimension in place, whatever the other strides.
  auto rows = [&](const at::Tensor& t) {
    const at::Tensor c = t.to(compute);
    return c.stride(-1) == 1 ? c : c.contiguous();
  };
  const std::array<at::Tensor, 5> in{rows(q), rows(k), rows(v), g.to(compute), beta.to(compute)};
  const bool kernel = cpu_kernels_run(q.device(), compute);
  at::Tensor o;
  std::vector<at::Tensor> outs, lasts;
  if (!plan.batches.empty()) {
    const std::vector<at::Tensor> xcs =
        kernel ? PackChunks::apply(in[0], in[1], in[2], in[3], in[4], &plan, d) : pack_aten(in, plan, d);
    for (const at::Tensor& xc : xcs) {
      at::Tensor last;
      outs.push_back(chunked_delta_rule(xc, Dk, Dv, final_state ? &last : nullptr));
      lasts.push_back(last);
    }
    o = kernel ? UnpackChunks::apply(at::TensorList(outs), &plan, B, S, H) : unpack_aten(outs, plan, B, S, H);
  } else {
    o = at::zeros({B, S, H, Dv}, in[2].options());
  }
  if (final_state) {  // each row's last sequence's state
    std::vector<at::Tensor> last;
    for (const auto& [batch, n] : plan.row_last)
      last.push_back(batch < 0 ? at::zeros({H, Dk, Dv}, in[2].options()) : lasts[size_t(batch)].view({-1, H, Dk, Dv})[n]);
    *final_state = at::stack(last, 0);  // [B,Hv,Dk,Dv]
  }
  return o.to(q.scalar_type());
}

}  // namespace glint
