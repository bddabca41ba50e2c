#include "model/layers.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/compat.h"
#include "core/cpu_kernels.h"
#include "core/error.h"
#include "core/grouped_linear.h"
#include "model/rms_norm.h"
#include "model/block_attention.h"

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
  if (adapter) {
    // A plain LoRA runs on the base GEMM's output in place (its two thin GEMMs, the base's
    // bias as the GEMM's start), and its backward adds into the base's dx: no [.., out]
    // update made, scaled and added, and no second dx to add.
    const LowRank lora = adapter->low_rank(x.scalar_type());
    if (lora.A.defined() && weight.scalar_type() == x.scalar_type()) {
      std::vector<int64_t> shape = x.sizes().vec();
      const at::Tensor rows = x.reshape({-1, shape.back()});
      shape.back() = weight.size(0);
      return grouped_linear(rows, weight.unsqueeze(0), {rows.size(0)}, lora.A.unsqueeze(0), lora.B.unsqueeze(0),
                            lora.scale, bias.defined() ? bias.unsqueeze(0) : at::Tensor())
          .view(shape);
    }
    return at::linear(x, weight, bias) + adapter->delta(x);
  }
  return at::linear(x, weight, bias);
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_, const TensorPlacement& p, bool offset)
    : eps(eps_), unit_offset(offset) {
  auto opts = at::TensorOptions().dtype(p.dtype).device(p.device);
  weight = register_parameter("weight", offset ? at::zeros({dim}, opts) : at::ones({dim}, opts));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x, const at::Tensor& gate) {
  return rms_norm(x, weight, eps, unit_offset, gate);
}

bool RMSNormImpl::one_pass(int64_t dtype_bytes) const {
  return cpu_kernels_run(weight.device(), dtype_bytes == 8 ? at::kDouble : dtype_bytes == 4 ? at::kFloat
                                                                                                  : at::kBFloat16);
}

double RMSNormImpl::kept_bytes(int64_t dtype_bytes) const {
  const double dim = double(weight.size(0)), compute = dtype_bytes == 8 ? 8 : 4;
  // One pass: the input (and the gate) and the reciprocal norm.
  if (one_pass(dtype_bytes)) return compute;
  // ATen's operators: the input widened to the compute type (the input itself when it is
  // that type), the normalized vector in the compute type and its reciprocal norm; with a
  // trained weight, the normalized vector in the input's type too.
  double kept = dim * compute + compute;
  if (dtype_bytes != compute) kept += dim * compute;
  if (weight.requires_grad()) kept += dim * double(dtype_bytes);
  return kept;
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

RotaryTables rotary_tables(const at::Tensor& position_ids, const at::Tensor& inv_freq, double attention_factor,
                           c10::ScalarType compute) {
  at::Tensor f = inv_freq.to(position_ids.device(), compute);                   // [D/2]
  at::Tensor freqs = position_ids.to(compute).unsqueeze(-1) * f;                // [B,S,D/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);                                 // [B,S,D]
  if (attention_factor == 1.0) return {emb.cos(), emb.sin()};
  return {emb.cos() * attention_factor, emb.sin() * attention_factor};
}

double yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

at::Tensor rope_inv_freq(int64_t dim, double theta, const ModelConfig::RopeScaling& r) {
  auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor pos_freqs = at::pow(theta, at::arange(0, dim, 2, opts) / double(dim));  // [dim/2]
  if (r.type.empty()) return 1.0 / pos_freqs;
  GLINT_ASSERT(r.type == "yarn", "RoPE scaling ", r.type);
  // Dimension whose wavelength makes `rotations` turns over the original context.
  auto correction_dim = [&](double rotations) {
    return double(dim) * std::log(double(r.original_max_position_embeddings) / (rotations * 2 * M_PI)) /
           (2 * std::log(theta));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // no division by zero
  at::Tensor ramp = ((at::arange(dim / 2, opts) - low) / (high - low)).clamp(0, 1);
  at::Tensor extrapolate = 1 - ramp;  // 1: keep the original frequency (high-frequency dims)
  return (1.0 / (r.factor * pos_freqs)) * ramp + (1.0 / pos_freqs) * extrapolate;
}

double rope_attention_factor(const ModelConfig::RopeScaling& r) {
  if (r.type.empty()) return 1.0;
  if (r.attention_factor > 0) return r.attention_factor;
  if (r.mscale != 0 && r.mscale_all_dim != 0) return yarn_mscale(r.factor, r.mscale) / yarn_mscale(r.factor, r.mscale_all_dim);
  return yarn_mscale(r.factor);
}

at::Tensor deinterleave_pairs(const at::Tensor& x) {
  std::vector<int64_t> shape = x.sizes().vec();
  const int64_t D = shape.back();
  shape.back() = D / 2;
  shape.push_back(2);
  // [..., D/2, 2] -> [..., 2, D/2] -> [..., D]
  std::vector<int64_t> out = x.sizes().vec();
  return x.reshape(shape).transpose(-1, -2).reshape(out);
}

at::Tensor apply_rotary(const at::Tensor& x, const RotaryTables& rope) {
  int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  at::Tensor rotated = at::cat({-x2, x1}, -1);
  at::Tensor cos = rope.cos.unsqueeze(1).to(x.scalar_type());  // [B,1,S,D]
  at::Tensor sin = rope.sin.unsqueeze(1).to(x.scalar_type());
  return x * cos + rotated * sin;
}

at::Tensor apply_partial_rotary(const at::Tensor& x, const RotaryTables& rope, int64_t R) {
  if (R == x.size(-1)) return apply_rotary(x, rope);
  std::vector<at::Tensor> parts = x.split_with_sizes({R, x.size(-1) - R}, -1);
  return at::cat({apply_rotary(parts[0], rope), parts[1]}, -1);
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

// Softmax(q.k / sqrt(D)) over the earlier keys: a fused kernel where there is one, else
// blocks of queries that never hold [S, S] scores.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (compat::fused_attention_available(q) || eager_attention())
    return compat::scaled_dot_product_attention(q, k, v, /*causal=*/true);
  return block_attention(q, k, v, 1.0 / std::sqrt(double(q.size(-1))));
}

// A padding token attends to itself only: its output is its own value (kv head repeated
// for each query head that reads it).
at::Tensor own_values(const at::Tensor& q, const at::Tensor&, const at::Tensor& v) {
  int64_t rep = q.size(1) / v.size(1);
  return (rep > 1 ? v.repeat_interleave(rep, 1) : v).to(q.scalar_type());
}

// One row's spans (or every row's, when the rows are alike) over q, k, v [b,N,S,D]. The
// tensors are split, not sliced: the backward of a split is one concatenation, where
// each slice's would write a whole zero-filled gradient.
at::Tensor attend_spans(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::vector<SequenceLayout::Span>& spans, size_t first, size_t end,
                        const SequenceKernel& kernel) {
  if (end - first == 1 && !spans[first].padding) return kernel.sequence(q, k, v);  // one sequence fills the row
  std::vector<int64_t> lengths;
  for (size_t n = first; n < end; ++n) lengths.push_back(spans[n].length);
  std::vector<at::Tensor> qs = q.split_with_sizes(lengths, 2), ks = k.split_with_sizes(lengths, 2),
                          vs = v.split_with_sizes(lengths, 2), parts;
  parts.reserve(lengths.size());
  for (size_t n = 0; n < lengths.size(); ++n)
    parts.push_back(spans[first + n].padding ? kernel.padding(qs[n], ks[n], vs[n])
                                             : kernel.sequence(qs[n], ks[n], vs[n]));
  return parts.size() == 1 ? parts[0] : at::cat(parts, 2);
}

}  // namespace

at::Tensor sequence_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const SequenceLayout& layout, const SequenceKernel& custom) {
  const int64_t B = q.size(0), N = q.size(1), S = q.size(2), D = q.size(3), Dv = v.size(3);
  GLINT_ASSERT(B == layout.rows && S == layout.seq_len, "attention over [", B, ", ", S, "] with a layout of [",
               layout.rows, ", ", layout.seq_len, "]");
  const bool plain = !custom.sequence;
  if (plain && layout.cu_seqlens.defined() && compat::varlen_attention_available(q) && Dv <= D) {
    // Tokens in [B*S] order: [B,N,S,D] -> [B*S,N,D]. The kernel wants values as wide as
    // keys: narrower ones are padded with zeros, which add nothing, and cut off after.
    auto tokens = [&](const at::Tensor& t) { return t.transpose(1, 2).reshape({B * S, t.size(1), t.size(3)}); };
    at::Tensor vt = tokens(v);
    if (Dv < D) vt = at::constant_pad_nd(vt, {0, D - Dv});
    at::Tensor o = compat::varlen_attention(tokens(q), tokens(k), vt, layout.cu_seqlens, layout.max_length);
    return (Dv < D ? o.narrow(-1, 0, Dv) : o).reshape({B, S, N * Dv});
  }
  const SequenceKernel kernel = plain ? SequenceKernel{causal_attention, own_values} : custom;
  GLINT_ASSERT(kernel.sequence && kernel.padding, "sequence_attention: a kernel needs both of its parts");
  at::Tensor out;
  if (layout.rows_alike) {
    out = attend_spans(q, k, v, layout.spans, 0, layout.spans.size() / B, kernel);
  } else {
    std::vector<at::Tensor> qs = q.split(1, 0), ks = k.split(1, 0), vs = v.split(1, 0), rows;
    size_t first = 0;
    for (int64_t b = 0; b < B; ++b) {
      size_t end = first;
      while (end < layout.spans.size() && layout.spans[end].row == b) ++end;
      rows.push_back(attend_spans(qs[b], ks[b], vs[b], layout.spans, first, end, kernel));
      first = end;
    }
    out = at::cat(rows, 0);
  }
  return out.transpose(1, 2).reshape({B, S, N * Dv});
}

ActivationMemory sequence_attention_memory(const ActivationShape& s, int64_t Nh, int64_t Nkv, int64_t D, int64_t Dv,
                                           int64_t window) {
  const double T = double(s.rows * s.seq_len), db = double(s.dtype_bytes), cb = s.dtype_bytes == 8 ? 8 : 4;
  ActivationMemory m;
  m.saved = T * (db * double(Nh * D + Nkv * D + Nkv * Dv + Nh * Dv) + cb * double(Nh));
  // Backward: one block's scores and their gradient, and the gradients of q, k, v and of
  // the output.
  m.working = 2 * cb * block_attention_scores(s.rows, Nh, s.seq_len, window) +
              T * db * double(Nh * D + Nkv * D + Nkv * Dv + Nh * Dv);
  return m;
}

ActivationMemory projected_attention_memory(const ActivationShape& s, const LinearImpl& q_proj, const LinearImpl& k_proj,
                                            const LinearImpl& v_proj, const LinearImpl& o_proj,
                                            const RMSNormImpl* q_norm, const RMSNormImpl* k_norm, int64_t Nh,
                                            int64_t Nkv, int64_t D, int64_t window) {
  const double T = double(s.rows * s.seq_len), db = double(s.dtype_bytes);
  ActivationMemory m = sequence_attention_memory(s, Nh, Nkv, D, D, window);
  double per_token = db * (q_proj.adapter_kept_per_row() + k_proj.adapter_kept_per_row() +
                           v_proj.adapter_kept_per_row() + o_proj.adapter_kept_per_row());
  if (q_proj.keeps_input() || k_proj.keeps_input() || v_proj.keeps_input()) per_token += db * double(q_proj.in_features());
  // A head norm keeps its input (the projection's output) and its own tensors.
  if (q_norm) per_token += double(Nh) * (db * double(D) + q_norm->kept_bytes(s.dtype_bytes));
  if (k_norm) per_token += double(Nkv) * (db * double(D) + k_norm->kept_bytes(s.dtype_bytes));
  // o_proj reads the attention output in [B, S, Nh*Dv] order: a copy of its own.
  if (o_proj.keeps_input()) per_token += db * double(o_proj.in_features());
  m.saved += T * per_token;
  return m;
}

}  // namespace glint
