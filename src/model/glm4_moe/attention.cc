#include "model/glm4_moe/attention.h"

#include <ATen/ATen.h>

#include "model/decode_cache.h"
#include "model/glm4_moe/config.h"

namespace glint {

Glm4MoeAttentionImpl::Glm4MoeAttentionImpl(const ModelConfig& c, const TensorPlacement& p)
    : num_heads(c.num_attention_heads),
      num_kv_heads(c.num_key_value_heads),
      head_dim(c.head_dim),
      rotary_dim(int64_t(double(c.head_dim) * c.partial_rotary_factor)) {
  const int64_t H = c.hidden_size;
  q_proj = register_module("q_proj", Linear(H, num_heads * head_dim, c.attention_bias, p));
  k_proj = register_module("k_proj", Linear(H, num_kv_heads * head_dim, c.attention_bias, p));
  v_proj = register_module("v_proj", Linear(H, num_kv_heads * head_dim, c.attention_bias, p));
  o_proj = register_module("o_proj", Linear(num_heads * head_dim, H, /*bias=*/false, p));
  if (glm(c).use_qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim, c.rms_norm_eps, p));
    k_norm = register_module("k_norm", RMSNorm(head_dim, c.rms_norm_eps, p));
  }
}

std::array<at::Tensor, 3> Glm4MoeAttentionImpl::qkv(const at::Tensor& x, const LayerContext& ctx) {
  const int64_t B = x.size(0), S = x.size(1), D = head_dim;
  at::Tensor q = q_proj->forward(x).view({B, S, num_heads, D});     // [B,S,Nh,D]
  at::Tensor k = k_proj->forward(x).view({B, S, num_kv_heads, D});  // [B,S,Nkv,D]
  at::Tensor v = v_proj->forward(x).view({B, S, num_kv_heads, D}).transpose(1, 2);
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = apply_partial_rotary(q.transpose(1, 2), ctx.rope.at(0), rotary_dim);
  k = apply_partial_rotary(k.transpose(1, 2), ctx.rope.at(0), rotary_dim);
  return {q, k, v};
}

at::Tensor Glm4MoeAttentionImpl::forward(const at::Tensor& x, const LayerContext& ctx) {
  auto [q, k, v] = qkv(x, ctx);
  return o_proj->forward(sequence_attention(q, k, v, ctx.layout));
}

at::Tensor Glm4MoeAttentionImpl::forward_cached(const at::Tensor& x, const LayerContext& ctx) {
  auto [q, k, v] = qkv(x, ctx);
  auto& state = ctx.cache->state<KvState>(this, [] { return std::make_unique<KvState>(); });
  return o_proj->forward(cached_attention(q, k, v, state, ctx));
}

double Glm4MoeAttentionImpl::decode_state_bytes(int64_t positions, int64_t dtype_bytes) const {
  return kv_state_bytes(positions, num_kv_heads * head_dim, num_kv_heads * head_dim, dtype_bytes);
}

double Glm4MoeAttentionImpl::score_macs_per_token(int64_t seq_len) const {
  return 2.0 * double(seq_len) * double(head_dim) * double(num_heads);  // QK^T and PV, full S x S
}

ActivationMemory Glm4MoeAttentionImpl::activation_memory(const ActivationShape& shape) const {
  return projected_attention_memory(shape, *q_proj, *k_proj, *v_proj, *o_proj, q_norm ? q_norm.get() : nullptr, k_norm ? k_norm.get() : nullptr, num_heads, num_kv_heads,
                                    head_dim, 0);
}

}  // namespace glint
