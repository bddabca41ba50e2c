#include "model/qwen3/attention.h"

#include <ATen/ATen.h>

#include "model/decode_cache.h"

namespace glint {

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

std::array<at::Tensor, 3> AttentionImpl::qkv(const at::Tensor& x, const LayerContext& ctx) {
  int64_t B = x.size(0), S = x.size(1);
  // [B,S,N*D] -> [B,S,N,D] -> norm over D -> [B,N,S,D]
  at::Tensor q = q_norm->forward(q_proj->forward(x).view({B, S, num_heads, head_dim})).transpose(1, 2);
  at::Tensor k = k_norm->forward(k_proj->forward(x).view({B, S, num_kv_heads, head_dim})).transpose(1, 2);
  at::Tensor v = v_proj->forward(x).view({B, S, num_kv_heads, head_dim}).transpose(1, 2);
  q = apply_rotary(q, ctx.rope.at(0));
  k = apply_rotary(k, ctx.rope.at(0));
  return {q, k, v};
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const LayerContext& ctx) {
  auto [q, k, v] = qkv(x, ctx);
  return o_proj->forward(sequence_attention(q, k, v, ctx.layout));
}

at::Tensor AttentionImpl::forward_cached(const at::Tensor& x, const LayerContext& ctx) {
  auto [q, k, v] = qkv(x, ctx);
  auto& state = ctx.cache->state<KvState>(this, [] { return std::make_unique<KvState>(); });
  return o_proj->forward(cached_attention(q, k, v, state, ctx));
}

double AttentionImpl::decode_state_bytes(int64_t positions, int64_t dtype_bytes) const {
  return kv_state_bytes(positions, num_kv_heads * head_dim, num_kv_heads * head_dim, dtype_bytes);
}

double AttentionImpl::score_macs_per_token(int64_t seq_len) const {
  return 2.0 * double(seq_len) * double(head_dim) * double(num_heads);  // QK^T and PV, full S x S
}

ActivationMemory AttentionImpl::activation_memory(const ActivationShape& shape) const {
  return projected_attention_memory(shape, *q_proj, *k_proj, *v_proj, *o_proj, q_norm.get(), k_norm.get(), num_heads, num_kv_heads,
                                    head_dim, 0);
}

}  // namespace glint
