#include "model/deepseek_v3/attention.h"

#include <ATen/ATen.h>

#include <cmath>

#include "model/decode_cache.h"
#include "model/deepseek_v3/config.h"

namespace glint {

namespace {
// The latent norms are built without the config's eps in transformers: always 1e-6.
constexpr double kLatentNormEps = 1e-6;
}  // namespace

MlaAttentionImpl::MlaAttentionImpl(const ModelConfig& c, const TensorPlacement& p)
    : num_heads(c.num_attention_heads),
      nope_dim(mla(c).qk_nope_head_dim),
      rope_dim(mla(c).qk_rope_head_dim),
      v_dim(mla(c).v_head_dim),
      kv_lora_rank(mla(c).kv_lora_rank),
      interleave(c.rope_interleave) {
  const int64_t H = c.hidden_size, Dqk = nope_dim + rope_dim;
  if (mla(c).q_lora_rank == 0) {
    q_proj = register_module("q_proj", Linear(H, num_heads * Dqk, false, p));
  } else {
    q_a_proj = register_module("q_a_proj", Linear(H, mla(c).q_lora_rank, c.attention_bias, p));
    q_a_layernorm = register_module("q_a_layernorm", RMSNorm(mla(c).q_lora_rank, kLatentNormEps, p));
    q_b_proj = register_module("q_b_proj", Linear(mla(c).q_lora_rank, num_heads * Dqk, false, p));
  }
  kv_a_proj_with_mqa = register_module("kv_a_proj_with_mqa", Linear(H, kv_lora_rank + rope_dim, c.attention_bias, p));
  kv_a_layernorm = register_module("kv_a_layernorm", RMSNorm(kv_lora_rank, kLatentNormEps, p));
  kv_b_proj = register_module("kv_b_proj", Linear(kv_lora_rank, num_heads * (nope_dim + v_dim), false, p));
  o_proj = register_module("o_proj", Linear(num_heads * v_dim, H, c.attention_bias, p));
  softmax_scale = 1.0 / std::sqrt(double(Dqk));
  if (!c.rope_scaling.type.empty() && c.rope_scaling.mscale_all_dim != 0) {
    double m = yarn_mscale(c.rope_scaling.factor, c.rope_scaling.mscale_all_dim);
    softmax_scale *= m * m;
  }
}

std::array<at::Tensor, 3> MlaAttentionImpl::qkv(const at::Tensor& x, const LayerContext& ctx) {
  const int64_t B = x.size(0), S = x.size(1), Dqk = nope_dim + rope_dim;
  at::Tensor q = q_proj ? q_proj->forward(x) : q_b_proj->forward(q_a_layernorm->forward(q_a_proj->forward(x)));
  q = q.view({B, S, num_heads, Dqk}).transpose(1, 2);                               // [B,N,S,Dqk]
  std::vector<at::Tensor> q_parts = q.split_with_sizes({nope_dim, rope_dim}, -1);
  at::Tensor kv = kv_a_proj_with_mqa->forward(x);                                     // [B,S,Ckv+R]
  std::vector<at::Tensor> kv_parts = kv.split_with_sizes({kv_lora_rank, rope_dim}, -1);
  at::Tensor kv_heads = kv_b_proj->forward(kv_a_layernorm->forward(kv_parts[0]))
                            .view({B, S, num_heads, nope_dim + v_dim})
                            .transpose(1, 2);                                         // [B,N,S,Dn+Dv]
  std::vector<at::Tensor> k_parts = kv_heads.split_with_sizes({nope_dim, v_dim}, -1);
  at::Tensor q_rot = q_parts[1], k_rot = kv_parts[1].unsqueeze(1);                    // [B,N,S,R], [B,1,S,R]
  if (interleave) {
    q_rot = deinterleave_pairs(q_rot);
    k_rot = deinterleave_pairs(k_rot);
  }
  q_rot = apply_rotary(q_rot, ctx.rope.at(0));
  k_rot = apply_rotary(k_rot, ctx.rope.at(0)).expand({B, num_heads, S, rope_dim});
  at::Tensor query = at::cat({q_parts[0], q_rot}, -1);
  at::Tensor key = at::cat({k_parts[0], k_rot}, -1);
  // The kernels scale by 1/sqrt(Dqk); a YaRN correction goes onto the queries.
  const double extra = softmax_scale * std::sqrt(double(Dqk));
  if (std::abs(extra - 1.0) > 1e-15) query = query * extra;
  return {query, key, k_parts[1]};
}

at::Tensor MlaAttentionImpl::forward(const at::Tensor& x, const LayerContext& ctx) {
  auto [query, key, value] = qkv(x, ctx);
  return o_proj->forward(sequence_attention(query, key, value, ctx.layout));
}

at::Tensor MlaAttentionImpl::forward_cached(const at::Tensor& x, const LayerContext& ctx) {
  auto [query, key, value] = qkv(x, ctx);
  auto& state = ctx.cache->state<KvState>(this, [] { return std::make_unique<KvState>(); });
  return o_proj->forward(cached_attention(query, key, value, state, ctx));
}

double MlaAttentionImpl::decode_state_bytes(int64_t positions, int64_t dtype_bytes) const {
  // Every head's key (nope | rope) and value, expanded from the latent.
  return kv_state_bytes(positions, num_heads * (nope_dim + rope_dim), num_heads * v_dim, dtype_bytes);
}

double MlaAttentionImpl::score_macs_per_token(int64_t seq_len) const {
  return double(seq_len) * double(num_heads) * double(nope_dim + rope_dim + v_dim);
}

ActivationMemory MlaAttentionImpl::activation_memory(const ActivationShape& s) const {
  const double T = double(s.rows * s.seq_len), db = double(s.dtype_bytes);
  const int64_t N = num_heads, Dqk = nope_dim + rope_dim;
  ActivationMemory m = sequence_attention_memory(s, N, N, Dqk, v_dim);
  double per_token = 0;
  const LinearImpl& q_in = q_proj ? *q_proj : *q_a_proj;
  if (q_in.keeps_input() || kv_a_proj_with_mqa->keeps_input()) per_token += db * double(q_in.in_features());
  // Each low-rank side: the down projection's output, kept by its norm, and the norm's
  // output where the up projection keeps its input.
  auto latent = [&](const LinearImpl& down, const RMSNormImpl& norm, const LinearImpl& up) {
    per_token += db * double(down.out_features()) + norm.kept_bytes(s.dtype_bytes) +
                 db * (down.adapter_kept_per_row() + up.adapter_kept_per_row());
    if (up.keeps_input()) per_token += db * double(up.in_features());
  };
  if (q_proj) per_token += db * q_proj->adapter_kept_per_row();
  else latent(*q_a_proj, *q_a_layernorm, *q_b_proj);
  latent(*kv_a_proj_with_mqa, *kv_a_layernorm, *kv_b_proj);
  per_token += db * o_proj->adapter_kept_per_row();
  if (o_proj->keeps_input()) per_token += db * double(o_proj->in_features());
  m.saved += T * per_token;
  return m;
}

}  // namespace glint
