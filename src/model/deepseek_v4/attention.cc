#include "model/deepseek_v4/attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "model/decode_cache.h"
#include "model/deepseek_v4/config.h"

namespace glint {

namespace {


// Softmaxes, norms, RoPE and indexer scores run in float32, or float64 for float64 models.
c10::ScalarType compute_type(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// Interleaved RoPE on the last rd dims of x [...,D]: pair i (D-rd+2i, D-rd+2i+1) turns by
// the angle of cos[...,i], sin[...,i] (rotate-half tables [...,rd] whose halves repeat;
// leading dims broadcast against x's). sign -1 turns back. The tables are rounded to x's
// dtype and the turn is computed in float32 (float64 for float64 x), as transformers does.
at::Tensor rotate_tail(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double sign) {
  const int64_t D = x.size(-1), rd = cos.size(-1), half = rd / 2;
  const auto cd = compute_type(x);
  at::Tensor c = cos.narrow(-1, 0, half).to(x.scalar_type()).to(cd);
  at::Tensor s = sin.narrow(-1, 0, half).to(x.scalar_type()).to(cd);
  if (sign < 0) s = -s;
  std::vector<int64_t> pairs = x.sizes().vec();
  pairs.back() = half;
  pairs.push_back(2);
  at::Tensor r = x.narrow(-1, D - rd, rd).to(cd).reshape(pairs);  // [...,rd/2,2]
  at::Tensor x0 = r.select(-1, 0), x1 = r.select(-1, 1);
  at::Tensor y = at::stack({x0 * c - x1 * s, x1 * c + x0 * s}, -1).flatten(-2).to(x.scalar_type());
  return rd == D ? y : at::cat({x.narrow(-1, 0, D - rd), y}, -1);
}

// x / sqrt(mean x^2 + eps) over the last dim, the factor computed in float32 (q_b_norm).
at::Tensor unweighted_rms_norm(const at::Tensor& x, double eps) {
  return x * at::rsqrt(x.to(compute_type(x)).pow(2).mean(-1, /*keepdim=*/true) + eps).to(x.scalar_type());
}

// t [B,S,...] cut into the spans of `layout`, in its order. Split, not sliced: the
// backward is one concatenation per row.
std::vector<at::Tensor> per_span(const at::Tensor& t, const SequenceLayout& layout) {
  std::vector<at::Tensor> rows = t.unbind(0), out;
  out.reserve(layout.spans.size());
  size_t n = 0;
  for (int64_t b = 0; b < layout.rows; ++b) {
    std::vector<int64_t> lengths;
    for (size_t k = n; k < layout.spans.size() && layout.spans[k].row == b; ++k) lengths.push_back(layout.spans[k].length);
    for (at::Tensor& piece : rows[b].split_with_sizes(lengths, 0)) out.push_back(piece);
    n += lengths.size();
  }
  return out;
}

// Rows w*rate of t [L,...], w < T: the rope rows of the entries' first tokens.
at::Tensor window_starts(const at::Tensor& t, int64_t rate, int64_t T) {
  std::vector<int64_t> shape = t.sizes().vec();
  shape[0] = rate;
  shape.insert(shape.begin(), T);
  return t.narrow(0, 0, T * rate).reshape(shape).select(1, 0);
}

// Entries visible to each query of a sequence by causality alone: visible[t][w] iff window
// w is complete at t, i.e. w < (t + 1) / rate. [L,T] bool.
at::Tensor causal_entries(int64_t L, int64_t T, int64_t rate, const c10::Device& device) {
  auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  return at::arange(T, opts).unsqueeze(0) < at::floor_divide(at::arange(1, L + 1, opts), rate).unsqueeze(1);
}

// A padding token is its own sequence of one: softmax over {its own key, the sink}.
// q [L,N,D], kv [L,D] -> [L,N,D].
at::Tensor self_only_attention(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& sinks, double scale) {
  const auto cd = compute_type(q);
  at::Tensor logits = (q * kv.unsqueeze(1)).sum(-1).to(cd) * scale;  // [L,N]
  at::Tensor p = at::sigmoid(logits - sinks.to(cd));                   // e^l / (e^l + e^sink)
  return p.to(q.scalar_type()).unsqueeze(-1) * kv.unsqueeze(1);
}

// Softmax attention of one sequence, in blocks of Qb queries: block j reads the window
// keys of tokens [j*Qb - (W-1), (j+1)*Qb) (one strided view of the front-padded keys),
// every entry, and a zero key for the sink, masked to what each query may see; the sink's
// logit joins each denominator. q [L,N,D], kv [L,D], entries [T,D] or undefined, visible
// [L,T] bool -> [L,N,D]. One product gives every logit of a block and one its output:
// the masks and the sink are one added bias (no masked copies, no concatenated logits,
// no narrowed probabilities whose gradients would be zero-filled copies).
// Work and saved probabilities per query: N * (Qb + W - 1 + T + 1) logits (and D-wide
// products each), so O(L * N * (W + L/m)) for the whole sequence; CSA scores every entry
// and masks the unselected ones rather than gathering the top-k.
at::Tensor blocked_attention(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& entries,
                             const at::Tensor& visible, const at::Tensor& sinks, int64_t window, int64_t block,
                             double scale) {
  const int64_t L = q.size(0), N = q.size(1), D = q.size(2);
  const int64_t W = window > 0 ? std::min(window, L) : L;
  const int64_t Qb = std::min(block, L), nb = (L + Qb - 1) / Qb, Lp = nb * Qb, K = Qb + W - 1;
  const int64_t T = entries.defined() ? entries.size(0) : 0, J = K + T + 1;
  const auto cd = compute_type(q);
  const double inf = std::numeric_limits<double>::infinity();
  auto lopts = at::TensorOptions().dtype(at::kLong).device(q.device());

  at::Tensor qb = at::constant_pad_nd(q, {0, 0, 0, 0, 0, Lp - L}).view({nb, Qb * N, D});
  // keys[j] = [kv_pad[j*Qb, j*Qb + K) | entries | 0]: [nb,J,D]; slot k < K is token
  // j*Qb + k - (W-1).
  std::vector<at::Tensor> keys{at::constant_pad_nd(kv, {0, 0, W - 1, Lp - L}).unfold(0, K, Qb).transpose(1, 2)};
  if (T > 0) keys.push_back(entries.unsqueeze(0).expand({nb, T, D}));
  keys.push_back(at::zeros({nb, 1, D}, kv.options()));
  const at::Tensor block_keys = at::cat(keys, 1);

  // The bias: 0 where query i of block j sees slot k, else -inf; the sink's slot holds
  // each head's sink logit (its key is zero, so the product leaves it alone).
  at::Tensor bias;
  {
    at::NoGradGuard no_grad;
    at::Tensor i = at::arange(Qb, lopts).view({1, Qb, 1}), k = at::arange(K, lopts).view({1, 1, K});
    at::Tensor j = at::arange(nb, lopts).view({nb, 1, 1});
    // Causal (k >= i), inside the window (k <= i + W - 1), not before the sequence.
    std::vector<at::Tensor> seen{(k >= i).logical_and(k <= i + (W - 1)).logical_and(j * Qb + k >= W - 1)};
    if (T > 0) seen.push_back(at::constant_pad_nd(visible, {0, 0, 0, Lp - L}).view({nb, Qb, T}));
    seen.push_back(at::ones({nb, Qb, 1}, lopts.dtype(at::kBool)));
    bias = at::zeros({nb, Qb, 1, J}, q.options().dtype(cd)).masked_fill_(at::cat(seen, -1).logical_not().unsqueeze(2), -inf);
  }
  at::Tensor sink_bias = at::constant_pad_nd(sinks.to(cd).view({1, 1, N, 1}), {J - 1, 0});  // [1,1,N,J]

  at::Tensor logits = at::matmul(qb, block_keys.transpose(1, 2)).view({nb, Qb, N, J}).to(cd).mul(scale);
  logits = logits.add_(bias).add_(sink_bias);
  at::Tensor p = at::softmax(logits, -1).to(q.scalar_type());  // [nb,Qb,N,J]
  at::Tensor out = at::matmul(p.view({nb, Qb * N, J}), block_keys);
  return out.view({Lp, N, D}).narrow(0, 0, L);
}

// The entries each query of a sequence keeps in CSA: the best min(topk, #causal) causal
// ones by the indexer's score, ties towards the lower entry. kv, gate [L,2dI]: the
// indexer's projections; q [L,nI,dI] (unrotated), w [L,nI]: its queries and head weights;
// cos, sin [L,rd]; causal [L,T] bool. Returns [L,T] bool. Scores run in float32, in chunks
// of queries that keep each [chunk,nI,T] product near 2^26 values.
at::Tensor indexer_selection(DeepseekV4IndexerImpl& ix, const at::Tensor& kv, const at::Tensor& gate,
                             const at::Tensor& q, const at::Tensor& w, const at::Tensor& cos, const at::Tensor& sin,
                             const at::Tensor& causal) {
  at::NoGradGuard no_grad;
  const int64_t L = causal.size(0), T = causal.size(1), nI = ix.heads;
  const auto cd = compute_type(q);
  at::Tensor keys = ix.entries(kv, gate, cos, sin).to(cd).t();  // [dI,T]
  GLINT_ASSERT(keys.size(1) == T, "indexer has ", keys.size(1), " entries, the compressor ", T);
  at::Tensor qr = rotate_tail(q, cos.unsqueeze(1), sin.unsqueeze(1), 1.0).to(cd);
  at::Tensor wgt = w.to(cd) * (1.0 / std::sqrt(double(nI)));
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 26) / std::max<int64_t>(1, nI * T));
  std::vector<at::Tensor> parts;
  for (int64_t t0 = 0; t0 < L; t0 += chunk) {
    const int64_t c = std::min(chunk, L - t0);
    at::Tensor ok = causal.narrow(0, t0, c);
    at::Tensor s = at::relu(at::matmul(qr.narrow(0, t0, c), keys)) * (1.0 / std::sqrt(double(ix.dim)));  // [c,nI,T]
    at::Tensor score = (s * wgt.narrow(0, t0, c).unsqueeze(-1)).sum(1).masked_fill(ok.logical_not(),
                                                                                  -std::numeric_limits<double>::infinity());
    at::Tensor idx = std::get<1>(at::sort(score, /*stable=*/true, -1, /*descending=*/true)).narrow(-1, 0, ix.topk);
    parts.push_back(at::zeros_like(ok).scatter_(1, idx, ok.gather(1, idx)));  // future picks dropped
  }
  return parts.size() == 1 ? parts[0] : at::cat(parts, 0);
}

}  // namespace

DeepseekV4CompressorImpl::DeepseekV4CompressorImpl(int64_t hidden, int64_t dim_, int64_t rate_, bool overlap_,
                                                   double eps, const TensorPlacement& p)
    : dim(dim_), rate(rate_), overlap(overlap_) {
  const int64_t C = overlap ? 2 * dim : dim;
  kv_proj = register_module("kv_proj", Linear(hidden, C, false, p));
  gate_proj = register_module("gate_proj", Linear(hidden, C, false, p));
  kv_norm = register_module("kv_norm", RMSNorm(dim, eps, p));
  position_bias = register_parameter("position_bias", new_weight({rate, C}, p));
}

at::Tensor DeepseekV4CompressorImpl::entries(const at::Tensor& kv, const at::Tensor& gate, const at::Tensor& cos,
                                             const at::Tensor& sin) {
  const int64_t L = kv.size(0), C = kv.size(1), T = L / rate;
  GLINT_ASSERT(C == (overlap ? 2 * dim : dim), "compressor input has ", C, " channels for dim ", dim);
  if (T == 0) return at::Tensor();
  const auto cd = compute_type(kv);
  at::Tensor v = kv.narrow(0, 0, T * rate).reshape({T, rate, C});
  at::Tensor g = gate.narrow(0, 0, T * rate).reshape({T, rate, C}).to(cd) + position_bias.to(cd);
  if (overlap) {
    // Slots [a-half of window w-1 | b-half of window w]: [T,2m,dim]. Window 0 has no
    // previous window: zero values behind -inf gates weigh nothing.
    at::Tensor va = v.narrow(-1, 0, dim), vb = v.narrow(-1, dim, dim);
    at::Tensor ga = g.narrow(-1, 0, dim), gb = g.narrow(-1, dim, dim);
    at::Tensor prev_v = at::cat({at::zeros({1, rate, dim}, v.options()), va.narrow(0, 0, T - 1)}, 0);
    at::Tensor prev_g = at::cat(
        {at::full({1, rate, dim}, -std::numeric_limits<double>::infinity(), g.options()), ga.narrow(0, 0, T - 1)}, 0);
    v = at::cat({prev_v, vb}, 1);
    g = at::cat({prev_g, gb}, 1);
  }
  at::Tensor pooled = (v * at::softmax(g, 1).to(v.scalar_type())).sum(1);  // [T,dim]
  return rotate_tail(kv_norm->forward(pooled), window_starts(cos, rate, T), window_starts(sin, rate, T), 1.0);
}

DeepseekV4IndexerScorerImpl::DeepseekV4IndexerScorerImpl(int64_t hidden, int64_t heads, const TensorPlacement& p) {
  weights_proj = register_module("weights_proj", Linear(hidden, heads, false, p));
}

DeepseekV4IndexerImpl::DeepseekV4IndexerImpl(const ModelConfig& c, const TensorPlacement& p)
    : DeepseekV4CompressorImpl(c.hidden_size, v4(c).index_head_dim, v4(c).compress_rate_csa, /*overlap=*/true,
                               c.rms_norm_eps, p),
      heads(v4(c).index_n_heads),
      topk(v4(c).index_topk) {
  q_b_proj = register_module("q_b_proj", Linear(v4(c).q_lora_rank, heads * dim, false, p));
  scorer = register_module("scorer", DeepseekV4IndexerScorer(c.hidden_size, heads, p));
}

DeepseekV4AttentionImpl::DeepseekV4AttentionImpl(const ModelConfig& c, int64_t layer, const TensorPlacement& p)
    : num_heads(c.num_attention_heads),
      head_dim(c.head_dim),
      rope_dim(v4(c).qk_rope_head_dim),
      groups(v4(c).o_groups),
      group_rank(v4(c).o_lora_rank),
      window(c.sliding_window),
      eps(c.rms_norm_eps) {
  GLINT_CHECK(layer >= 0 && layer < int64_t(c.layer_types.size()), "deepseek_v4 layer ", layer,
              " has no entry in layer_types (", c.layer_types.size(), " entries)");
  kind = c.layer_types[layer];
  GLINT_CHECK(deepseek_v4_layer_kind_known(kind), "deepseek_v4 layer_types[", layer, "] is \"", kind,
              "\"; expected ", kDeepseekV4Sliding, ", ", kDeepseekV4Csa, " or ", kDeepseekV4Hca);
  GLINT_CHECK(v4(c).q_lora_rank > 0, "deepseek_v4 needs q_lora_rank > 0, got ", v4(c).q_lora_rank);
  GLINT_CHECK(groups > 0 && group_rank > 0 && num_heads % groups == 0, "deepseek_v4: o_groups (", groups,
              ") must divide num_attention_heads (", num_heads, ") and o_lora_rank (", group_rank, ") be positive");
  GLINT_CHECK(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= head_dim, "deepseek_v4: qk_rope_head_dim (", rope_dim,
              ") must be even, positive and at most head_dim (", head_dim, ")");
  const int64_t H = c.hidden_size, D = head_dim, N = num_heads;
  q_a_proj = register_module("q_a_proj", Linear(H, v4(c).q_lora_rank, false, p));
  q_a_norm = register_module("q_a_norm", RMSNorm(v4(c).q_lora_rank, eps, p));
  q_b_proj = register_module("q_b_proj", Linear(v4(c).q_lora_rank, N * D, false, p));
  kv_proj = register_module("kv_proj", Linear(H, D, false, p));
  kv_norm = register_module("kv_norm", RMSNorm(D, eps, p));
  o_a_proj = register_module("o_a_proj", Linear(N * D / groups, groups * group_rank, false, p));
  o_b_proj = register_module("o_b_proj", Linear(groups * group_rank, H, false, p));
  sinks = register_parameter("sinks", new_weight({N}, p));
  if (kind == kDeepseekV4Hca) {
    GLINT_CHECK(v4(c).compress_rate_hca > 0, "deepseek_v4: compress_rate_hca must be positive, got ", v4(c).compress_rate_hca);
    compressor = register_module("compressor", DeepseekV4Compressor(H, D, v4(c).compress_rate_hca, false, eps, p));
  } else if (kind == kDeepseekV4Csa) {
    GLINT_CHECK(v4(c).compress_rate_csa > 0, "deepseek_v4: compress_rate_csa must be positive, got ", v4(c).compress_rate_csa);
    GLINT_CHECK(v4(c).index_n_heads > 0 && v4(c).index_topk > 0 && v4(c).index_head_dim >= rope_dim,
                "deepseek_v4: CSA needs index_n_heads > 0 (", v4(c).index_n_heads, "), index_topk > 0 (", v4(c).index_topk,
                ") and index_head_dim (", v4(c).index_head_dim, ") at least qk_rope_head_dim (", rope_dim, ")");
    compressor = register_module("compressor", DeepseekV4Compressor(H, D, v4(c).compress_rate_csa, true, eps, p));
    compressor->indexer = compressor->register_module("indexer", std::make_shared<DeepseekV4IndexerImpl>(c, p));
  }
}

namespace {

// The attention's per-token projections of x [B,S,H]: qr [B,S,Cq] (the queries' low-rank
// input, the indexer's too), q [B,S,N,D] and kv [B,S,D], both rotated at their positions.
struct Projected {
  at::Tensor qr, q, kv;
};

Projected project(DeepseekV4AttentionImpl& m, const at::Tensor& x, const RotaryTables& rope) {
  const int64_t B = x.size(0), S = x.size(1);
  Projected p;
  p.qr = m.q_a_norm->forward(m.q_a_proj->forward(x));
  p.q = unweighted_rms_norm(m.q_b_proj->forward(p.qr).view({B, S, m.num_heads, m.head_dim}), m.eps);
  p.q = rotate_tail(p.q, rope.cos.unsqueeze(2), rope.sin.unsqueeze(2), 1.0);
  p.kv = rotate_tail(m.kv_norm->forward(m.kv_proj->forward(x)), rope.cos, rope.sin, 1.0);
  return p;
}

// The attention of every sequence of ctx.layout over its own tokens: [B,S,N,D], before
// the turn back (forward's blocked path).
at::Tensor attend_sequences(DeepseekV4AttentionImpl& m, const at::Tensor& x, const Projected& p,
                            const RotaryTables& rope, const LayerContext& ctx) {
  const SequenceLayout& layout = ctx.layout;
  const int64_t B = x.size(0), S = x.size(1);
  const double scale = 1.0 / std::sqrt(double(m.head_dim));
  std::vector<at::Tensor> qs = per_span(p.q, layout), kvs = per_span(p.kv, layout);
  std::vector<at::Tensor> coss = per_span(rope.cos, layout), sins = per_span(rope.sin, layout);
  std::vector<at::Tensor> ckv, cgate;  // the compressor's projections per span [L,C]
  DeepseekV4Compressor compressor = m.compressor;
  if (compressor) {
    ckv = per_span(compressor->kv_proj->forward(x), layout);
    cgate = per_span(compressor->gate_proj->forward(x), layout);
  }
  // The indexer runs only for sequences with more entries than it keeps (otherwise every
  // causal entry is kept), and without gradient: its picks are integers.
  std::vector<at::Tensor> ikv, igate, iq, iw;
  const auto& ix = compressor ? compressor->indexer : nullptr;
  bool any_selection = false;
  for (const auto& s : layout.spans) any_selection |= ix && !s.padding && s.length / ix->rate > ix->topk;
  if (any_selection) {
    at::NoGradGuard no_grad;
    ikv = per_span(ix->kv_proj->forward(x), layout);
    igate = per_span(ix->gate_proj->forward(x), layout);
    iq = per_span(ix->q_b_proj->forward(p.qr).view({B, S, ix->heads, ix->dim}), layout);
    iw = per_span(ix->scorer->weights_proj->forward(x), layout);
  }

  std::vector<at::Tensor> outs;  // [L,N,D] per span
  outs.reserve(layout.spans.size());
  for (size_t n = 0; n < layout.spans.size(); ++n) {
    const auto& span = layout.spans[n];
    if (span.padding) {
      outs.push_back(self_only_attention(qs[n], kvs[n], m.sinks, scale));
      continue;
    }
    at::Tensor entries, visible;  // [T,D], [L,T]
    if (compressor) entries = compressor->entries(ckv[n], cgate[n], coss[n], sins[n]);
    if (entries.defined()) {
      const int64_t T = entries.size(0);
      visible = causal_entries(span.length, T, compressor->rate, x.device());
      if (ix && T > ix->topk) visible = indexer_selection(*ix, ikv[n], igate[n], iq[n], iw[n], coss[n], sins[n], visible);
    }
    outs.push_back(blocked_attention(qs[n], kvs[n], entries, visible, m.sinks, m.window, m.query_block, scale));
  }
  std::vector<at::Tensor> rows;
  for (size_t n = 0; n < outs.size();) {
    size_t end = n;
    while (end < outs.size() && layout.spans[end].row == layout.spans[n].row) ++end;
    rows.push_back(end - n == 1 ? outs[n] : at::cat(std::vector<at::Tensor>(outs.begin() + n, outs.begin() + end), 0));
    n = end;
  }
  return rows.size() == 1 ? rows[0].unsqueeze(0) : at::stack(rows, 0);  // [B,S,N,D]
}

// The heads' outputs o [B,S,N,D] turned back at each query's position, through the
// grouped low-rank output: [B,S,H].
at::Tensor grouped_output(DeepseekV4AttentionImpl& m, at::Tensor o, const RotaryTables& rope) {
  const int64_t B = o.size(0), S = o.size(1), N = m.num_heads, D = m.head_dim;
  // V carried the keys' rotation: turn each head's output back at the query's position.
  o = rotate_tail(o, rope.cos.unsqueeze(2), rope.sin.unsqueeze(2), -1.0);

  // Grouped output, as transformers' DeepseekV4GroupedLinear: o_a_proj.weight [G*R,P] read
  // as [G,R,P], group g (heads [g*N/G, (g+1)*N/G)) times its R rows, one batched product.
  // An adapter on o_a_proj adds, per group, the rows of its delta that belong to the group:
  // LoRA on o_a_proj means LoRA on the weight the product reads.
  const int64_t G = m.groups, R = m.group_rank, P = N * D / G;
  at::Tensor og = o.reshape({B * S, G, P});
  at::Tensor y = at::bmm(og.transpose(0, 1), m.o_a_proj->weight.view({G, R, P}).transpose(1, 2)).transpose(0, 1);  // [BS,G,R]
  if (m.o_a_proj->adapter) {
    // [B,S,...] in, as every adapter expects (a tenant adapter picks its rows along dim 0).
    at::Tensor d = m.o_a_proj->adapter->delta(o.reshape({B, S, G, P})).view({B * S, G, G, R});  // group g's input, all G*R rows
    y = y + d.diagonal(0, 1, 2).transpose(1, 2);                         // keep group g's rows
  }
  return m.o_b_proj->forward(y.reshape({B, S, G * R}));
}

// Decoding state of one DeepSeek-V4 attention module, per row b of lengths()[b] tokens
// (Kw = window - 1, Kc = 2m - 1 overlapping, m - 1 otherwise: the unfinished block and,
// overlapping, the one before it, whose a-halves the next entry pools):
struct DeepseekV4DecodeState : LayerState {
  at::Tensor window_kv;    // [B,Kw,D]: the last keys (rotated), append_recent
  at::Tensor ckv, cgate;   // [B,Kc,C]: the compressor's projections of the last tokens
  at::Tensor ccos, csin;   // [B,Kc,rd]: their "compress" rope rows
  at::Tensor entries;      // [B,Cap_e,D]: row b's first lengths()[b] / m are its entries
  at::Tensor ikv, igate;   // [B,Kc,2dI]: the indexer's projections of the last tokens (CSA)
  at::Tensor ikeys;        // [B,Cap_e,dI]: the indexer's keys of the entries (CSA)
  std::vector<at::Tensor*> tensors() override {
    return {&window_kv, &ckv, &cgate, &ccos, &csin, &entries, &ikv, &igate, &ikeys};
  }
};

// Appends to `store` [B,Cap_e,dim] the entries of `comp` that this forward completes, per
// row; kv, gate [B,Kc+S,C], cos, sin [B,Kc+S,rd]: append_recent's views of the row's last
// Kc tokens then the new ones. Returns the most entries a row holds now.
int64_t add_entries(DeepseekV4CompressorImpl& comp, at::Tensor& store, const at::Tensor& kv, const at::Tensor& gate,
                    const at::Tensor& cos, const at::Tensor& sin, int64_t Kc, const DecodeCache& cache) {
  const int64_t B = cache.rows(), rate = comp.rate;
  int64_t most = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = cache.lengths()[b], c0 = len / rate, c1 = (len + cache.new_counts()[b]) / rate;
    most = std::max(most, c1);
    if (c1 == c0) continue;
    // From the block before the first new entry (overlapping: its a-half joins that entry;
    // the entry of that block itself, pooled without its own predecessor, is dropped).
    const int64_t first = comp.overlap ? std::max<int64_t>(c0 - 1, 0) : c0;
    const int64_t from = first * rate - len + Kc, count = (c1 - first) * rate;  // slots of the views
    GLINT_ASSERT(from >= 0, "deepseek_v4 decoding: block ", first, " of row ", b, " is no longer kept");
    at::Tensor e = comp.entries(kv[b].narrow(0, from, count), gate[b].narrow(0, from, count),
                                cos[b].narrow(0, from, count), sin[b].narrow(0, from, count));
    // Room for every entry the cache's positions can make, as the keys' state has.
    reserve_slots(store, 1, std::max(c1, cache.capacity() / rate), {B, 0, comp.dim}, e.options());
    store[b].narrow(0, c0, c1 - c0).copy_(e.narrow(0, c0 - first, c1 - c0));
  }
  return most;
}

}  // namespace

at::Tensor DeepseekV4AttentionImpl::forward(const at::Tensor& x, const LayerContext& ctx) {
  const SequenceLayout& layout = ctx.layout;
  GLINT_ASSERT(x.dim() == 3 && layout.rows == x.size(0) && layout.seq_len == x.size(1), "deepseek_v4 attention over ",
               x.sizes(), " with a layout of [", layout.rows, ", ", layout.seq_len, "]");
  const RotaryTables& rope = rope_tables(ctx, x);
  Projected p = project(*this, x, rope);
  return grouped_output(*this, attend_sequences(*this, x, p, rope, ctx), rope);
}

const RotaryTables& DeepseekV4AttentionImpl::rope_tables(const LayerContext& ctx, const at::Tensor& x) const {
  const RotaryTables& r = ctx.rope.at(kind == kDeepseekV4Sliding ? 0 : 1);
  GLINT_ASSERT(r.cos.size(-1) == rope_dim && r.cos.size(0) == x.size(0) && r.cos.size(1) == x.size(1),
               "deepseek_v4 rope tables ", r.cos.sizes(), " for x ", x.sizes(), " and ", rope_dim, " rope dims");
  return r;
}

at::Tensor DeepseekV4AttentionImpl::forward_cached(const at::Tensor& x, const LayerContext& ctx) {
  if (!keeps_decode_state()) return history_forward(*this, x, ctx);
  GLINT_ASSERT(ctx.cache != nullptr && x.dim() == 3, "deepseek_v4 forward_cached without a cache");
  const DecodeCache& cache = *ctx.cache;
  auto& st = ctx.cache->state<DeepseekV4DecodeState>(this, [] { return std::make_unique<DeepseekV4DecodeState>(); });
  const int64_t B = x.size(0), S = x.size(1), N = num_heads, D = head_dim, Kw = window - 1;
  const RotaryTables& rope = rope_tables(ctx, x);
  Projected p = project(*this, x, rope);
  at::Tensor keys = append_recent(st.window_kv, Kw, p.kv, cache);  // [B,Kw+S,D]

  // The compressor's (and CSA's indexer's) unfinished blocks, and the entries completed now.
  int64_t E = 0;  // entries of the longest row
  const auto& ix = compressor ? compressor->indexer : nullptr;
  if (compressor) {
    const int64_t m = compressor->rate, Kc = compressor->overlap ? 2 * m - 1 : m - 1;
    at::Tensor cos = append_recent(st.ccos, Kc, rope.cos, cache), sin = append_recent(st.csin, Kc, rope.sin, cache);
    at::Tensor ckv = append_recent(st.ckv, Kc, compressor->kv_proj->forward(x), cache);
    at::Tensor cgate = append_recent(st.cgate, Kc, compressor->gate_proj->forward(x), cache);
    E = add_entries(*compressor, st.entries, ckv, cgate, cos, sin, Kc, cache);
    if (ix) {
      at::NoGradGuard no_grad;
      GLINT_ASSERT(ix->rate == m, "deepseek_v4: indexer rate ", ix->rate, ", compressor rate ", m);
      at::Tensor ikv = append_recent(st.ikv, Kc, ix->kv_proj->forward(x), cache);
      at::Tensor igate = append_recent(st.igate, Kc, ix->gate_proj->forward(x), cache);
      add_entries(*ix, st.ikeys, ikv, igate, cos, sin, Kc, cache);
    }
  }
  // Whole prompts: the blocked kernels of forward, the state built above for what follows.
  if (cache.prefill()) return grouped_output(*this, attend_sequences(*this, x, p, rope, ctx), rope);

  const auto cd = compute_type(x);
  const double scale = 1.0 / std::sqrt(double(D)), inf = std::numeric_limits<double>::infinity();
  auto lopts = cache.write_index().options();
  // Query i of row b (position lengths[b] + i) sees slot j of the keys (position
  // lengths[b] - Kw + j) for i <= j <= i + Kw, from the row's start on.
  at::Tensor j = at::arange(Kw + S, lopts).view({1, 1, Kw + S}), i = at::arange(S, lopts).view({1, S, 1});
  at::Tensor start = Kw - at::tensor(cache.lengths(), at::kLong).to(lopts.device()).view({B, 1, 1});
  at::Tensor seen = (j >= i).logical_and(j <= i + Kw).logical_and(j >= start);  // [B,S,Kw+S]
  at::Tensor qf = p.q.reshape({B, S * N, D});
  std::vector<at::Tensor> logits;
  logits.push_back(at::matmul(qf, keys.transpose(1, 2)).view({B, S, N, Kw + S}).to(cd).mul(scale).masked_fill(
      seen.logical_not().unsqueeze(2), -inf));
  at::Tensor entries;
  if (E > 0) {
    entries = st.entries.narrow(1, 0, E);  // [B,E,D]
    // Entry w is complete at position t iff w < (t + 1) / m.
    at::Tensor visible = at::arange(E, lopts).view({1, 1, E}) <
                         at::floor_divide(cache.write_index() + 1, compressor->rate).unsqueeze(-1);  // [B,S,E]
    if (ix && E > ix->topk) {
      // The indexer's picks: the best min(topk, #visible) visible entries, ties towards the
      // lower entry (as indexer_selection).
      at::NoGradGuard no_grad;
      const int64_t nI = ix->heads, dI = ix->dim;
      at::Tensor iq = ix->q_b_proj->forward(p.qr).view({B, S, nI, dI});
      iq = rotate_tail(iq, rope.cos.unsqueeze(2), rope.sin.unsqueeze(2), 1.0).to(cd);
      at::Tensor wgt = ix->scorer->weights_proj->forward(x).to(cd) * (1.0 / std::sqrt(double(nI)));  // [B,S,nI]
      at::Tensor ik = st.ikeys.narrow(1, 0, E).to(cd);                                                 // [B,E,dI]
      at::Tensor s = at::relu(at::matmul(iq.view({B, S * nI, dI}), ik.transpose(1, 2))).view({B, S, nI, E}) *
                     (1.0 / std::sqrt(double(dI)));
      at::Tensor score = (s * wgt.unsqueeze(-1)).sum(2).masked_fill(visible.logical_not(), -inf);  // [B,S,E]
      at::Tensor idx = std::get<1>(at::sort(score, /*stable=*/true, -1, /*descending=*/true)).narrow(-1, 0, ix->topk);
      visible = at::zeros_like(visible).scatter_(2, idx, visible.gather(2, idx));
    }
    logits.push_back(at::matmul(qf, entries.transpose(1, 2)).view({B, S, N, E}).to(cd).mul(scale).masked_fill(
        visible.logical_not().unsqueeze(2), -inf));
  }
  logits.push_back(sinks.to(cd).view({1, 1, N, 1}).expand({B, S, N, 1}));
  at::Tensor prob = at::softmax(at::cat(logits, -1), -1).to(p.q.scalar_type());  // [B,S,N,Kw+S+E+1]
  at::Tensor out = at::matmul(prob.narrow(-1, 0, Kw + S).reshape({B, S * N, Kw + S}), keys);
  if (E > 0) out = out + at::matmul(prob.narrow(-1, Kw + S, E).reshape({B, S * N, E}), entries);
  return grouped_output(*this, out.view({B, S, N, D}), rope);
}

double DeepseekV4AttentionImpl::decode_state_bytes(int64_t positions, int64_t dtype_bytes) const {
  if (!keeps_decode_state()) return AttentionModule::decode_state_bytes(positions, dtype_bytes);
  // DeepseekV4DecodeState: the window's last keys; per compressor (and CSA's indexer) the
  // projections of its unfinished blocks with their rope rows (in the compute dtype) and
  // one entry per `rate` positions.
  const double b = double(dtype_bytes), rope_b = dtype_bytes == 8 ? 8 : 4;
  double n = double(window - 1) * double(head_dim) * b;
  auto pooled = [&](const DeepseekV4CompressorImpl& comp, bool rope) {
    const double Kc = double(comp.overlap ? 2 * comp.rate - 1 : comp.rate - 1);
    const double C = double(comp.kv_proj->out_features());
    double bytes = Kc * 2 * C * b + double(positions / comp.rate) * double(comp.dim) * b;
    if (rope) bytes += Kc * 2 * double(rope_dim) * rope_b;
    return bytes;
  };
  if (compressor) {
    n += pooled(*compressor, true);
    if (compressor->indexer) n += pooled(*compressor->indexer, false);
  }
  return n;
}

double DeepseekV4AttentionImpl::score_macs_per_token(int64_t seq_len) const {
  // Per query: scores and values over the window and the entries it sees (half of a
  // sequence's entries on average; CSA at most index_topk), D wide each, per head; the
  // compressor's pooling (one product per channel per token); the indexer scoring every
  // causal entry (half on average) per index head, when it has to choose.
  const double S = double(seq_len), W = window > 0 ? std::min<double>(double(window), S) : S / 2;
  double keys = W, extra = 0;
  if (compressor) {
    const double T = std::floor(S / double(compressor->rate));
    keys += compressor->indexer ? std::min(T / 2, double(compressor->indexer->topk)) : T / 2;
    extra += compressor->overlap ? 2.0 * head_dim : double(head_dim);
    if (const auto& ix = compressor->indexer; ix && T > double(ix->topk))
      extra += 2.0 * ix->dim + double(ix->heads) * double(ix->dim) * T / 2;
  }
  return 2.0 * double(num_heads) * double(head_dim) * keys + extra;
}

ActivationMemory DeepseekV4AttentionImpl::activation_memory(const ActivationShape& s) const {
  // One sequence per row of seq_len tokens (the most a row's blocks and entries reach).
  const double db = double(s.dtype_bytes), cb = s.dtype_bytes == 8 ? 8 : 4;
  const int64_t L = std::max<int64_t>(1, s.seq_len), Qb = std::min(query_block, L), nb = (L + Qb - 1) / Qb;
  const double pad = double(nb * Qb) / double(L), N = double(num_heads), D = double(head_dim);
  const double W = double(window > 0 ? std::min(window, L) : L), K = double(Qb) + W - 1;
  const double T = compressor ? double(L / compressor->rate) : 0;
  const double Cq = double(q_a_proj->out_features());
  double per_token = 0;
  bool x_kept = q_a_proj->keeps_input() || kv_proj->keeps_input();
  // Queries: q_a's output (kept by its norm) and the norm's output where q_b keeps it;
  // q_b's output and its unweighted norm; the rotated queries, padded to whole blocks.
  per_token += db * Cq + q_a_norm->kept_bytes(s.dtype_bytes) + (q_b_proj->keeps_input() ? db * Cq : 0);
  per_token += db * N * D + cb * N + db * N * D * pad;
  // Keys: kv_proj's output and its norm; each block's keys (its window's, the entries and
  // the sink's), which both products read.
  per_token += db * D + kv_norm->kept_bytes(s.dtype_bytes) + db * D * pad * (K + T + 1) / double(Qb);
  // Each query's probabilities over its block's keys.
  per_token += pad * cb * N * (K + T + 1);
  if (compressor) {
    // The compressor's two projections, its gates' softmax and (overlapping) the windows
    // joined with their neighbours'; the entries are rate times fewer than the tokens.
    const double C = double(compressor->kv_proj->out_features());
    per_token += db * C * (compressor->overlap ? 4 : 2) + db * D * 3 / double(compressor->rate);
    per_token += db * (compressor->kv_proj->adapter_kept_per_row() + compressor->gate_proj->adapter_kept_per_row());
    x_kept |= compressor->kv_proj->keeps_input() || compressor->gate_proj->keeps_input();
  }
  if (x_kept) per_token += db * double(q_a_proj->in_features());
  // The grouped output: the heads' outputs turned back, and o_b's input.
  per_token += db * N * D + (o_b_proj->keeps_input() ? db * double(o_b_proj->in_features()) : 0);
  for (const Linear& l : {q_a_proj, q_b_proj, kv_proj, o_b_proj}) per_token += db * l->adapter_kept_per_row();
  per_token += db * double(groups) * o_a_proj->adapter_kept_per_row();
  ActivationMemory m;
  m.saved = double(s.rows * s.seq_len) * per_token;
  // The logits of one block while its softmax runs and in backward.
  m.working = 3 * cb * double(s.rows) * double(Qb) * N * (K + T + 1);
  // Without gradients no block's probabilities outlive it: the projections of every token
  // (queries, rotated and padded; keys; the compressor's) and the heads' outputs, beside
  // one block's logits and probabilities (the sequences run one at a time).
  double projected = db * (Cq + 2 * N * D * pad + 2 * D + N * D + double(o_b_proj->in_features()));
  if (compressor) projected += db * 2 * double(compressor->kv_proj->out_features());
  m.inference = double(s.rows * s.seq_len) * projected + 2 * cb * double(Qb) * N * (K + T + 1);
  return m;
}

}  // namespace glint
