#include "model/layers.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

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

at::Tensor segment_causal_mask(const at::Tensor& segment_ids) {
  int64_t S = segment_ids.size(1);
  auto dev = segment_ids.device();
  at::Tensor same = segment_ids.unsqueeze(2).eq(segment_ids.unsqueeze(1));  // [B,S,S]
  at::Tensor causal = at::ones({S, S}, at::TensorOptions().dtype(at::kBool).device(dev)).tril();
  at::Tensor valid = segment_ids.ge(0).unsqueeze(2);                        // query not pad
  at::Tensor eye = at::eye(S, at::TensorOptions().dtype(at::kBool).device(dev));
  at::Tensor allowed = (same & causal & valid) | eye;
  at::Tensor mask = at::zeros(allowed.sizes(), at::TensorOptions().dtype(at::kFloat).device(dev));
  mask.masked_fill_(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  return mask.unsqueeze(1);  // [B,1,S,S]
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
                                  const at::Tensor& mask) {
  int64_t B = x.size(0), S = x.size(1);
  // [B,S,N*D] -> [B,S,N,D] -> norm over D -> [B,N,S,D]
  at::Tensor q = q_norm->forward(q_proj->forward(x).view({B, S, num_heads, head_dim})).transpose(1, 2);
  at::Tensor k = k_norm->forward(k_proj->forward(x).view({B, S, num_kv_heads, head_dim})).transpose(1, 2);
  at::Tensor v = v_proj->forward(x).view({B, S, num_kv_heads, head_dim}).transpose(1, 2);
  q = apply_rotary(q, rope);
  k = apply_rotary(k, rope);
  // Query head h reads kv head h / (num_heads / num_kv_heads).
  at::Tensor out = compat::scaled_dot_product_attention(q, k, v, mask);  // [B,N,S,D]
  out = out.transpose(1, 2).reshape({B, S, num_heads * head_dim});
  return o_proj->forward(out);
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
