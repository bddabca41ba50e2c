#include "model/gpt_oss/attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "model/decode_cache.h"
#include "model/gpt_oss/config.h"

namespace glint {

namespace {

at::ScalarType compute_type(const at::Tensor& t) { return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// q [b,Nh,L,D], k, v [b,Nh,L,D] (kv heads repeated) of whole sequences of length L.
at::Tensor attend_sequence(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                           int64_t window, double scale) {
  const int64_t b = q.size(0), N = q.size(1), L = q.size(2);
  const auto cd = compute_type(q);
  at::Tensor logits = at::matmul(q.to(cd), k.to(cd).transpose(-1, -2)) * scale;  // [b,N,L,L]
  at::Tensor i = at::arange(L, at::TensorOptions().dtype(at::kLong).device(q.device())).unsqueeze(1);
  at::Tensor j = i.transpose(0, 1);
  at::Tensor hidden = j > i;  // [L,L]: the future
  if (window > 0) hidden = hidden.logical_or(i - j >= window);
  logits = logits.masked_fill(hidden, -std::numeric_limits<double>::infinity());
  at::Tensor sink = sinks.to(cd).view({1, N, 1, 1}).expand({b, N, L, 1});
  at::Tensor probs = at::softmax(at::cat({logits, sink}, -1), -1).narrow(-1, 0, L);  // [b,N,L,L]
  return at::matmul(probs.to(v.scalar_type()), v);
}

// Padding tokens q, k, v [b,Nh,n,D]: each attends to its own key and the sink.
at::Tensor attend_self(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                       double scale) {
  const auto cd = compute_type(q);
  at::Tensor logit = (q.to(cd) * k.to(cd)).sum(-1, /*keepdim=*/true) * scale;  // [b,N,n,1]
  at::Tensor p = at::sigmoid(logit - sinks.to(cd).view({1, -1, 1, 1}));         // e^l / (e^l + e^sink)
  return p.to(v.scalar_type()) * v;
}

// The spans [first, end) of one row (or of every row when the rows are alike) over q, k, v.
// Split, not sliced: the backward of a split is one concatenation.
at::Tensor attend_spans(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                        const std::vector<SequenceLayout::Span>& spans, size_t first, size_t end, int64_t window,
                        double scale) {
  std::vector<int64_t> lengths;
  for (size_t n = first; n < end; ++n) lengths.push_back(spans[n].length);
  std::vector<at::Tensor> qs = q.split_with_sizes(lengths, 2), ks = k.split_with_sizes(lengths, 2),
                          vs = v.split_with_sizes(lengths, 2), parts;
  for (size_t n = 0; n < lengths.size(); ++n)
    parts.push_back(spans[first + n].padding ? attend_self(qs[n], ks[n], vs[n], sinks, scale)
                                             : attend_sequence(qs[n], ks[n], vs[n], sinks, window, scale));
  return parts.size() == 1 ? parts[0] : at::cat(parts, 2);
}

}  // namespace

at::Tensor sink_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                          const SequenceLayout& layout, int64_t window, double scale) {
  const int64_t B = q.size(0), N = q.size(1), S = q.size(2), D = v.size(3);
  GLINT_ASSERT(B == layout.rows && S == layout.seq_len, "attention over [", B, ", ", S, "] with a layout of [",
               layout.rows, ", ", layout.seq_len, "]");
  const int64_t rep = N / k.size(1);
  at::Tensor kr = rep > 1 ? k.repeat_interleave(rep, 1) : k, vr = rep > 1 ? v.repeat_interleave(rep, 1) : v;
  at::Tensor out;
  if (layout.rows_alike) {
    out = attend_spans(q, kr, vr, sinks, layout.spans, 0, layout.spans.size() / B, window, scale);
  } else {
    std::vector<at::Tensor> qs = q.split(1, 0), ks = kr.split(1, 0), vs = vr.split(1, 0), rows;
    size_t first = 0;
    for (int64_t b = 0; b < B; ++b) {
      size_t end = first;
      while (end < layout.spans.size() && layout.spans[end].row == b) ++end;
      rows.push_back(attend_spans(qs[b], ks[b], vs[b], sinks, layout.spans, first, end, window, scale));
      first = end;
    }
    out = at::cat(rows, 0);
  }
  return out.transpose(1, 2).reshape({B, S, N * D});
}

GptOssAttentionImpl::GptOssAttentionImpl(const ModelConfig& c, int64_t layer, const TensorPlacement& p)
    : num_heads(c.num_attention_heads),
      num_kv_heads(c.num_key_value_heads),
      head_dim(c.head_dim),
      window(c.layer_types.at(layer) == kGptOssSliding ? c.sliding_window : 0) {
  const int64_t H = c.hidden_size;
  q_proj = register_module("q_proj", Linear(H, num_heads * head_dim, c.attention_bias, p));
  k_proj = register_module("k_proj", Linear(H, num_kv_heads * head_dim, c.attention_bias, p));
  v_proj = register_module("v_proj", Linear(H, num_kv_heads * head_dim, c.attention_bias, p));
  o_proj = register_module("o_proj", Linear(num_heads * head_dim, H, c.attention_bias, p));
  sinks = register_parameter("sinks", new_weight({num_heads}, p));
}

std::array<at::Tensor, 3> GptOssAttentionImpl::qkv(const at::Tensor& x, const LayerContext& ctx) {
  const int64_t B = x.size(0), S = x.size(1), D = head_dim;
  at::Tensor q = apply_rotary(q_proj->forward(x).view({B, S, num_heads, D}).transpose(1, 2), ctx.rope.at(0));
  at::Tensor k = apply_rotary(k_proj->forward(x).view({B, S, num_kv_heads, D}).transpose(1, 2), ctx.rope.at(0));
  at::Tensor v = v_proj->forward(x).view({B, S, num_kv_heads, D}).transpose(1, 2);
  return {q, k, v};
}

at::Tensor GptOssAttentionImpl::forward(const at::Tensor& x, const LayerContext& ctx) {
  auto [q, k, v] = qkv(x, ctx);
  return o_proj->forward(sink_attention(q, k, v, sinks, ctx.layout, window, 1.0 / std::sqrt(double(head_dim))));
}

at::Tensor GptOssAttentionImpl::forward_cached(const at::Tensor& x, const LayerContext& ctx) {
  auto [q, k, v] = qkv(x, ctx);
  auto& state = ctx.cache->state<KvState>(this, [] { return std::make_unique<KvState>(); });
  return o_proj->forward(cached_attention(q, k, v, state, ctx, sinks, window));
}

double GptOssAttentionImpl::score_macs_per_token(int64_t seq_len) const {
  const int64_t keys = window > 0 ? std::min(seq_len, window) : seq_len;
  return 2.0 * double(keys) * double(head_dim) * double(num_heads);  // QK^T and PV
}

}  // namespace glint
