#include "model/gpt_oss/attention.h"

#include <ATen/ATen.h>

#include <cmath>

#include "core/error.h"
#include "model/block_attention.h"
#include "model/decode_cache.h"
#include "model/gpt_oss/config.h"

namespace glint {

namespace {

at::ScalarType compute_type(const at::Tensor& t) { return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// Padding tokens q [b,Nh,n,D], k, v [b,Nkv,n,D]: each attends to its own key and the sink.
at::Tensor attend_self(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                       double scale) {
  const int64_t rep = q.size(1) / k.size(1);
  at::Tensor kr = rep > 1 ? k.repeat_interleave(rep, 1) : k, vr = rep > 1 ? v.repeat_interleave(rep, 1) : v;
  const auto cd = compute_type(q);
  at::Tensor logit = (q.to(cd) * kr.to(cd)).sum(-1, /*keepdim=*/true) * scale;  // [b,N,n,1]
  at::Tensor p = at::sigmoid(logit - sinks.to(cd).view({1, -1, 1, 1}));          // e^l / (e^l + e^sink)
  return p.to(vr.scalar_type()) * vr;
}

}  // namespace

at::Tensor sink_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                          const SequenceLayout& layout, int64_t window, double scale) {
  SequenceKernel kernel;
  kernel.sequence = [&](const at::Tensor& qs, const at::Tensor& ks, const at::Tensor& vs) {
    return block_attention(qs, ks, vs, scale, sinks, window);
  };
  kernel.padding = [&](const at::Tensor& qs, const at::Tensor& ks, const at::Tensor& vs) {
    return attend_self(qs, ks, vs, sinks, scale);
  };
  return sequence_attention(q, k, v, layout, kernel);
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

double GptOssAttentionImpl::decode_state_bytes(int64_t positions, int64_t dtype_bytes) const {
  // Every position's, the sliding layers' too (the window is a mask).
  return kv_state_bytes(positions, num_kv_heads * head_dim, num_kv_heads * head_dim, dtype_bytes);
}

double GptOssAttentionImpl::score_macs_per_token(int64_t seq_len) const {
  const int64_t keys = window > 0 ? std::min(seq_len, window) : seq_len;
  return 2.0 * double(keys) * double(head_dim) * double(num_heads);  // QK^T and PV
}

ActivationMemory GptOssAttentionImpl::activation_memory(const ActivationShape& shape) const {
  return projected_attention_memory(shape, *q_proj, *k_proj, *v_proj, *o_proj, nullptr, nullptr, num_heads, num_kv_heads,
                                    head_dim, window);
}

}  // namespace glint
