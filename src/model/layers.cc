#include "model/layers.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "core/compat.h"
#include "core/error.h"

namespace glint {

at::Tensor new_weight(at::IntArrayRef shape, const TensorPlacement& place) {
  auto opts = at::TensorOptions().dtype(place.dtype).device(place.device);
  return place.lazy ? at::empty(shape, opts) : at::zeros(shape, opts);
}

LinearImpl::LinearImpl(int64_t in, int64_t out, bool has_bias, const TensorPlacement& p) {
  auto opts = at::TensorOptions().dtype(p.dtype).device(p.device);
  weight = register_parameter("weight", new_weight({out, in}, p));
  if (has_bias) bias = register_parameter("bias", at::zeros({out}, opts));
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  at::Tensor y = at::linear(x, weight, bias);
  if (adapter) y = y + adapter->delta(x);
  return y;
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_, const TensorPlacement& p) : eps(eps_) {
  weight = register_parameter("weight",
                              at::ones({dim}, at::TensorOptions().dtype(p.dtype).device(p.device)));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  // Compute in float32 (or wider), multiply by the weight in the input dtype.
  auto compute = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor xf = x.to(compute);
  at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  at::Tensor normed = (xf * at::rsqrt(var + eps)).to(x.scalar_type());
  return weight * normed;
}

RotaryTables rotary_tables(const at::Tensor& position_ids, int64_t head_dim, double theta,
                           c10::ScalarType compute) {
  auto opts = at::TensorOptions().dtype(at::kDouble).device(position_ids.device());
  // inv_freq[i] = theta^(-2i/D), i in [0, D/2): computed in float64, then `compute`.
  at::Tensor inv_freq = at::pow(theta, -at::arange(0, head_dim, 2, opts) / double(head_dim))
                            .to(compute);                          // [D/2]
  at::Tensor freqs = position_ids.to(compute).unsqueeze(-1) * inv_freq;  // [B,S,D/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);                     // [B,S,D]
  return {emb.cos(), emb.sin()};
}

at::Tensor apply_rotary(const at::Tensor& x, const RotaryTables& rope) {
  int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  at::Tensor rotated = at::cat({-x2, x1}, -1);
  at::Tensor cos = rope.cos.unsqueeze(1).to(x.scalar_type());  // [B,1,S,D]
  at::Tensor sin = rope.sin.unsqueeze(1).to(x.scalar_type());
  return x * cos + rotated * sin;
}

SequenceLayout sequence_layout(const at::Tensor& segment_ids, const c10::Device& device) {
  GLINT_CHECK(segment_ids.dim() == 2, "segment_ids must be [B,S], got ", segment_ids.sizes());
  at::Tensor ids = segment_ids.to(at::kCPU, at::kLong).contiguous();
  SequenceLayout out;
  out.rows = ids.size(0);
  out.seq_len = ids.size(1);
  const int64_t* id = ids.data_ptr<int64_t>();
  std::vector<int64_t> seen;  // the ids already closed in this row
  for (int64_t b = 0; b < out.rows; ++b) {
    seen.clear();
    const int64_t* row = id + b * out.seq_len;
    for (int64_t i = 0; i < out.seq_len;) {
      int64_t j = i + 1;
      while (j < out.seq_len && row[j] == row[i]) ++j;
      bool padding = row[i] < 0;
      if (!padding) {
        GLINT_CHECK(std::find(seen.begin(), seen.end(), row[i]) == seen.end(), "segment_ids: row ", b,
                    " has segment ", row[i], " again at position ", i, " after another segment; a sequence "
                    "must be one contiguous run");
        seen.push_back(row[i]);
      }
      out.spans.push_back({b, i, j - i, padding});
      i = j;
    }
  }
  // Rows alike: the spans of every row repeat row 0's.
  size_t per_row = 0;
  while (per_row < out.spans.size() && out.spans[per_row].row == 0) ++per_row;
  out.rows_alike = out.rows > 0 && per_row * out.rows == out.spans.size();
  for (size_t n = per_row; out.rows_alike && n < out.spans.size(); ++n) {
    const auto &a = out.spans[n], &first = out.spans[n % per_row];
    out.rows_alike = a.start == first.start && a.length == first.length && a.padding == first.padding;
  }
  std::vector<int32_t> cu{0};
  for (const auto& s : out.spans) {
    int64_t n = s.padding ? s.length : 1, len = s.padding ? 1 : s.length;
    for (int64_t k = 0; k < n; ++k) cu.push_back(int32_t(cu.back() + len));
    out.max_length = std::max(out.max_length, len);
  }
  out.cu_seqlens = at::tensor(cu, at::kInt).to(device, /*non_blocking=*/true);
  return out;
}

namespace {

// A padding token attends to itself only: its output is its own value (kv head repeated
// for each query head that reads it).
at::Tensor own_values(const at::Tensor& v, int64_t heads, c10::ScalarType dtype) {
  int64_t rep = heads / v.size(1);
  return (rep > 1 ? v.repeat_interleave(rep, 1) : v).to(dtype);
}

// One row's spans (or every row's, when the rows are alike) over q, k, v [b,N,S,D]. The
// tensors are split, not sliced: the backward of a split is one concatenation, where
// each slice's would write a whole zero-filled gradient.
at::Tensor attend_spans(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::vector<SequenceLayout::Span>& spans, size_t first, size_t end) {
  if (end - first == 1 && !spans[first].padding)  // one sequence fills the row
    return compat::scaled_dot_product_attention(q, k, v, /*causal=*/true);
  std::vector<int64_t> lengths;
  for (size_t n = first; n < end; ++n) lengths.push_back(spans[n].length);
  std::vector<at::Tensor> qs = q.split_with_sizes(lengths, 2), ks = k.split_with_sizes(lengths, 2),
                          vs = v.split_with_sizes(lengths, 2), parts;
  parts.reserve(lengths.size());
  for (size_t n = 0; n < lengths.size(); ++n)
    parts.push_back(spans[first + n].padding
                        ? own_values(vs[n], q.size(1), q.scalar_type())
                        : compat::scaled_dot_product_attention(qs[n], ks[n], vs[n], /*causal=*/true));
  return at::cat(parts, 2);
}

}  // namespace

at::Tensor sequence_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const SequenceLayout& layout) {
  const int64_t B = q.size(0), N = q.size(1), S = q.size(2), D = q.size(3);
  GLINT_ASSERT(B == layout.rows && S == layout.seq_len, "attention over [", B, ", ", S, "] with a layout of [",
               layout.rows, ", ", layout.seq_len, "]");
  if (layout.cu_seqlens.defined() && compat::varlen_attention_available(q)) {
    // Tokens in [B*S] order: [B,N,S,D] -> [B*S,N,D].
    auto tokens = [&](const at::Tensor& t) { return t.transpose(1, 2).reshape({B * S, t.size(1), D}); };
    return compat::varlen_attention(tokens(q), tokens(k), tokens(v), layout.cu_seqlens, layout.max_length)
        .view({B, S, N * D});
  }
  at::Tensor out;
  if (layout.rows_alike) {
    out = attend_spans(q, k, v, layout.spans, 0, layout.spans.size() / B);
  } else {
    std::vector<at::Tensor> qs = q.split(1, 0), ks = k.split(1, 0), vs = v.split(1, 0), rows;
    size_t first = 0;
    for (int64_t b = 0; b < B; ++b) {
      size_t end = first;
      while (end < layout.spans.size() && layout.spans[end].row == b) ++end;
      rows.push_back(attend_spans(qs[b], ks[b], vs[b], layout.spans, first, end));
      first = end;
    }
    out = at::cat(rows, 0);
  }
  return out.transpose(1, 2).reshape({B, S, N * D});
}

AttentionImpl::AttentionImpl(const ModelConfig& c, const TensorPlacement& p)
    : num_heads(c.num_attention_heads), num_kv_heads(c.num_key_value_heads), head_dim(c.head_dim) {
  int64_t H = c.hidden_size;
  q_proj = register_module("q_proj", Linear(H, num_heads * head_dim, c.attention_bias, p));
  k_proj = register_module("k_proj", Linear(H, num_kv_heads * head_dim, c.attention_bias, p));
  v_proj = register_module("v_proj", Linear(H, num_kv_heads * head_dim, c.attention_bias, p));
  o_proj = register_module("o_proj", Linear(num_heads * head_dim, H, c.attention_bias, p));
  q_norm = register_module("q_norm", RMSNorm(head_dim, c.rms_norm_eps, p));
  k_norm = register_module("k_norm", RMSNorm(head_dim, c.rms_norm_eps, p));
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const RotaryTables& rope,
                                  const SequenceLayout& layout) {
  int64_t B = x.size(0), S = x.size(1);
  // [B,S,N*D] -> [B,S,N,D] -> norm over D -> [B,N,S,D]
  at::Tensor q = q_norm->forward(q_proj->forward(x).view({B, S, num_heads, head_dim})).transpose(1, 2);
  at::Tensor k = k_norm->forward(k_proj->forward(x).view({B, S, num_kv_heads, head_dim})).transpose(1, 2);
  at::Tensor v = v_proj->forward(x).view({B, S, num_kv_heads, head_dim}).transpose(1, 2);
  q = apply_rotary(q, rope);
  k = apply_rotary(k, rope);
  return o_proj->forward(sequence_attention(q, k, v, layout));
}

DenseMlpImpl::DenseMlpImpl(int64_t hidden, int64_t intermediate, const TensorPlacement& p) {
  gate_proj = register_module("gate_proj", Linear(hidden, intermediate, false, p));
  up_proj = register_module("up_proj", Linear(hidden, intermediate, false, p));
  down_proj = register_module("down_proj", Linear(intermediate, hidden, false, p));
}

at::Tensor DenseMlpImpl::forward(const at::Tensor& x) {
  return down_proj->forward(at::silu(gate_proj->forward(x)) * up_proj->forward(x));
}

}  // namespace glint
