// Legend: B rows, S positions, Hv value heads, Dk key dim, Dv value dim, C conv channels,
// W kernel width. Inside the chunked rule: N sequences batched together, P their padded
// length, L the chunk length, K = P / L chunks, F = 2 Dk + Dv + 2 packed input features.
#include "model/qwen3_5/gated_delta.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "core/error.h"

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

// Offset of every token from the start of its sequence, [B,S] int64 on the host; a padding
// token is a sequence of one (offset 0).
at::Tensor offsets_in_sequence(const SequenceLayout& layout) {
  at::Tensor offsets = at::zeros({layout.rows, layout.seq_len}, at::kLong);
  auto a = offsets.accessor<int64_t, 2>();
  for (const Span& span : layout.spans) {
    GLINT_ASSERT(
        span.row >= 0 && span.row < layout.rows && span.start >= 0 && span.start + span.length <= layout.seq_len,
        "span row ", span.row, " [", span.start, ", +", span.length, ") outside [", layout.rows, ", ", layout.seq_len,
        "]");
    if (span.padding) continue;
    for (int64_t i = 0; i < span.length; ++i) a[span.row][span.start + i] = i;
  }
  return offsets;
}

// The delta rule of N sequences that each start at position 0 of x and fill it, or are
// followed by zero padding (k = v = q = 0, g = beta = 0, which touches neither the earlier
// outputs nor anything read later).
// x [N,P,Hv,F] = [q | k | v | g | beta] along F -> o [N,P,Hv,Dv]; P a multiple of L.
//
// Within a chunk, with G the cumulative log decay from the chunk start and S0 the state
// entering it, the state after position i is
//   S_i = e^{G_i} S0 + sum_{j<=i} e^{G_i - G_j} k_j u_j^T,   u = U - Y S0,
// where [U | Y] solves (I + A) [U | Y] = [beta V | beta K e^G] with A the strictly lower
// part of (beta K K^T) * e^{G_i - G_j} (the WY form of the chunk's products of
// Householder-like updates). So a chunk costs a few [L,L] and [L,D] products plus one
// triangular solve, and only the state crosses chunks. Every exponent is <= 0.
// With final_state non-null it receives the state after the last position [N,H,Dk,Dv]
// (padding leaves the state as it was).
at::Tensor chunked_delta_rule(const at::Tensor& x, int64_t L, int64_t Dk, int64_t Dv, at::Tensor* final_state) {
  const int64_t N = x.size(0), P = x.size(1), H = x.size(2), F = x.size(3), K = P / L;
  GLINT_ASSERT(K * L == P && F == 2 * Dk + Dv + 2, "chunked rule over P=", P, ", L=", L, ", F=", F);
  at::Tensor xc = x.transpose(1, 2).reshape({N, H, K, L, F});
  std::vector<at::Tensor> parts = xc.split_with_sizes({Dk, Dk, Dv, 1, 1}, -1);
  const at::Tensor& q = parts[0];                  // [N,H,K,L,Dk]
  const at::Tensor& k = parts[1];                  // [N,H,K,L,Dk]
  const at::Tensor& v = parts[2];                  // [N,H,K,L,Dv]
  const at::Tensor& beta = parts[4];               // [N,H,K,L,1]
  at::Tensor G = parts[3].squeeze(-1).cumsum(-1);  // [N,H,K,L]

  // decay[i,j] = e^{G_i - G_j} for j <= i, else 0 (masked before exp: G_i - G_j > 0 above
  // the diagonal and could overflow).
  at::Tensor above = at::ones({L, L}, x.options().dtype(at::kBool)).triu(1);
  at::Tensor decay = (G.unsqueeze(-1) - G.unsqueeze(-2))
                         .masked_fill(above, -std::numeric_limits<double>::infinity())
                         .exp();  // [N,H,K,L,L]

  at::Tensor k_beta = k * beta;
  // Its diagonal is never read: the solve takes the matrix as unit lower triangular.
  at::Tensor A = at::matmul(k_beta, k.transpose(-1, -2)) * decay;            // [N,H,K,L,L]
  at::Tensor rhs = at::cat({v * beta, k_beta * G.unsqueeze(-1).exp()}, -1);  // [N,H,K,L,Dv+Dk]
  at::Tensor uy = at::linalg_solve_triangular(A, rhs, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
  std::vector<at::Tensor> uy_parts = uy.split_with_sizes({Dv, Dk}, -1);

  at::Tensor intra = at::matmul(q, k.transpose(-1, -2)) * decay;  // [N,H,K,L,L], j <= i
  at::Tensor q_from_start = q * G.unsqueeze(-1).exp();            // reads S0 decayed to i
  at::Tensor G_last = G.narrow(-1, L - 1, 1);                     // [N,H,K,1]
  at::Tensor k_to_end = k * (G_last - G).unsqueeze(-1).exp();     // [N,H,K,L,Dk]
  at::Tensor chunk_decay = G_last.exp().unsqueeze(-1);            // [N,H,K,1,1]

  // unbind, not select: its backward is one stack instead of K zero-filled copies.
  std::vector<at::Tensor> us = uy_parts[0].unbind(2), ys = uy_parts[1].unbind(2), qs = q_from_start.unbind(2),
                          intras = intra.unbind(2), ks = k_to_end.unbind(2), decays = chunk_decay.unbind(2);
  std::vector<at::Tensor> outs;
  outs.reserve(K);
  at::Tensor state;  // [N,H,Dk,Dv]; undefined while it is still zero
  for (int64_t c = 0; c < K; ++c) {
    at::Tensor u = state.defined() ? us[c] - at::matmul(ys[c], state) : us[c];  // [N,H,L,Dv]
    at::Tensor o = at::matmul(intras[c], u);
    if (state.defined()) o = o + at::matmul(qs[c], state);
    outs.push_back(o);
    if (c + 1 < K || final_state) {
      at::Tensor added = at::matmul(ks[c].transpose(-1, -2), u);
      state = state.defined() ? state * decays[c] + added : added;
    }
  }
  if (final_state) *final_state = state;
  return at::stack(outs, 2).reshape({N, H, P, Dv}).transpose(1, 2);
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

double gated_delta_rule_kept_bytes(int64_t seq_len, int64_t Hv, int64_t Dk, int64_t Dv, int64_t dtype_bytes) {
  const auto [L, P] = chunk_shape(std::max<int64_t>(1, seq_len), 64);
  const double cb = dtype_bytes == 8 ? 8 : 4, l = double(L), dk = double(Dk), dv = double(Dv);
  // Per padded token and head: five [L, L] rows (decay, k k^T, A, q k^T, intra), k beta,
  // the solve's result, q and k decayed, u, the inputs (2 Dk + Dv + 2) and their decays,
  // and the state of each chunk (two per chunk: before and after its decay).
  const double per_head = 5 * l + 4 * dk + 2 * dv + (2 * dk + dv + 2) + 2 + 2 * dk * dv / l;
  return cb * per_head * double(Hv) * double(P) / double(std::max<int64_t>(1, seq_len));
}

at::Tensor causal_depthwise_conv1d(const at::Tensor& x, const at::Tensor& weight, const SequenceLayout& layout) {
  GLINT_CHECK(x.dim() == 3, "causal_depthwise_conv1d: x must be [B,S,C], got ", x.sizes());
  const int64_t B = x.size(0), S = x.size(1), C = x.size(2);
  GLINT_CHECK(weight.dim() == 3 && weight.size(0) == C && weight.size(1) == 1,
              "causal_depthwise_conv1d: weight must be [", C, ",1,W], got ", weight.sizes());
  GLINT_CHECK(B == layout.rows && S == layout.seq_len, "causal_depthwise_conv1d: x is [", B, ", ", S,
              ", ...] but the layout is [", layout.rows, ", ", layout.seq_len, "]");
  const int64_t W = weight.size(2);
  const auto compute = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor xc = x.to(compute);
  at::Tensor w = weight.to(compute).reshape({C, W});                // tap W-1 multiplies the current token
  at::Tensor offsets = offsets_in_sequence(layout).to(x.device());  // [B,S]

  // A sum of W shifted copies of x, each masked where the shift would cross the start of
  // the token's sequence: no per-sequence work, and the same ops on every device.
  at::Tensor out = xc * w.select(1, W - 1);
  for (int64_t lag = 1; lag < W && lag < S; ++lag) {
    at::Tensor shifted = at::constant_pad_nd(xc.narrow(1, 0, S - lag), {0, 0, lag, 0});  // [b,t] = x[b,t-lag]
    at::Tensor inside = offsets.ge(lag).unsqueeze(-1).to(compute);                       // [B,S,1]
    out = out + shifted * inside * w.select(1, W - 1 - lag);
  }
  return out.to(x.scalar_type());
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
