#include "model/deepseek_v3/attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

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

MlaAttentionImpl::Projected MlaAttentionImpl::project(const at::Tensor& x, const LayerContext& ctx) {
  const int64_t B = x.size(0), S = x.size(1), Dqk = nope_dim + rope_dim;
  at::Tensor q = q_proj ? q_proj->forward(x) : q_b_proj->forward(q_a_layernorm->forward(q_a_proj->forward(x)));
  q = q.view({B, S, num_heads, Dqk}).transpose(1, 2);                               // [B,N,S,Dqk]
  std::vector<at::Tensor> q_parts = q.split_with_sizes({nope_dim, rope_dim}, -1);
  at::Tensor kv = kv_a_proj_with_mqa->forward(x);                                     // [B,S,Ckv+R]
  std::vector<at::Tensor> kv_parts = kv.split_with_sizes({kv_lora_rank, rope_dim}, -1);
  at::Tensor q_rot = q_parts[1], k_rot = kv_parts[1].unsqueeze(1);                    // [B,N,S,R], [B,1,S,R]
  if (interleave) {
    q_rot = deinterleave_pairs(q_rot);
    k_rot = deinterleave_pairs(k_rot);
  }
  Projected p;
  p.query = at::cat({q_parts[0], apply_rotary(q_rot, ctx.rope.at(0))}, -1);
  p.latent = kv_a_layernorm->forward(kv_parts[0]);
  p.k_rot = apply_rotary(k_rot, ctx.rope.at(0));
  // The kernels scale by 1/sqrt(Dqk); a YaRN correction goes onto the queries.
  const double extra = softmax_scale * std::sqrt(double(Dqk));
  if (std::abs(extra - 1.0) > 1e-15) p.query = p.query * extra;
  return p;
}

std::array<at::Tensor, 2> MlaAttentionImpl::expand(const Projected& p) {
  const int64_t B = p.latent.size(0), S = p.latent.size(1);
  at::Tensor kv_heads = kv_b_proj->forward(p.latent)
                            .view({B, S, num_heads, nope_dim + v_dim})
                            .transpose(1, 2);                                         // [B,N,S,Dn+Dv]
  std::vector<at::Tensor> k_parts = kv_heads.split_with_sizes({nope_dim, v_dim}, -1);
  at::Tensor key = at::cat({k_parts[0], p.k_rot.expand({B, num_heads, S, rope_dim})}, -1);
  return {key, k_parts[1]};
}

at::Tensor MlaAttentionImpl::forward(const at::Tensor& x, const LayerContext& ctx) {
  Projected p = project(x, ctx);
  auto [key, value] = expand(p);
  return o_proj->forward(sequence_attention(p.query, key, value, ctx.layout));
}

namespace {
// What MLA caches per row: [B,Cap,Ckv] latents and [B,Cap,R] rotated RoPE keys.
struct LatentState : LayerState {
  at::Tensor latent, rot;
  std::vector<at::Tensor*> tensors() override { return {&latent, &rot}; }
};
}  // namespace

at::Tensor MlaAttentionImpl::latent_attention(const Projected& p, const LayerContext& ctx) {
  const DecodeCache& cache = *ctx.cache;
  const int64_t B = p.latent.size(0), S = p.latent.size(1), N = num_heads, C = kv_lora_rank, R = rope_dim;
  auto& state = ctx.cache->state<LatentState>(this, [] { return std::make_unique<LatentState>(); });
  cache.store(state.latent, 1, p.latent);
  cache.store(state.rot, 1, p.k_rot.squeeze(1));
  // Whole prompts: the packed-sequence kernels over the expanded keys, as in training.
  if (cache.prefill()) {
    auto [key, value] = expand(p);
    return sequence_attention(p.query, key, value, ctx.layout);
  }

  // Head n's key at position t is W_K[n] c_t (nope) and the shared rotated key; its value
  // W_V[n] c_t, with [W_K; W_V] head n's rows of kv_b_proj. So q . k = (W_K[n]^T q) . c_t,
  // and the output sum_t p_t W_V[n] c_t = W_V[n] (sum_t p_t c_t): per head, two products
  // with the weight, and the cached positions read once for every head.
  const int64_t T = cache.span(), Dn = nope_dim, Dv = v_dim;
  const auto compute = p.latent.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor w = kv_b_proj->weight.reshape({N, Dn + Dv, C});  // a view of a contiguous weight
  const at::Tensor latent = state.latent.narrow(1, 0, T), rot = state.rot.narrow(1, 0, T);  // [B,T,C], [B,T,R]
  // Heads first for the products with the weight: [N, B*S, .].
  at::Tensor q_nope = p.query.narrow(-1, 0, Dn).transpose(0, 1).reshape({N, B * S, Dn});
  at::Tensor q_lat = at::bmm(q_nope, w.narrow(1, 0, Dn)).view({N, B, S, C}).transpose(0, 1).reshape({B, N * S, C});
  at::Tensor q_rot = p.query.narrow(-1, Dn, R).reshape({B, N * S, R});
  at::Tensor scores = at::bmm(q_lat, latent.transpose(1, 2)).add_(at::bmm(q_rot, rot.transpose(1, 2)));  // [B,N*S,T]
  scores = scores.to(compute)
               .mul_(1.0 / std::sqrt(double(Dn + R)))
               .view({B, N, S, T})
               .masked_fill(keys_out_of_sight(cache, T).view({B, 1, S, T}), -std::numeric_limits<double>::infinity());
  at::Tensor prob = at::softmax(scores, -1).to(latent.scalar_type()).view({B, N * S, T});
  at::Tensor o_lat = at::bmm(prob, latent).view({B, N, S, C}).transpose(0, 1).reshape({N, B * S, C});
  at::Tensor out = at::bmm(o_lat, w.narrow(1, Dn, Dv).transpose(1, 2));  // [N,B*S,Dv]
  return out.view({N, B, S, Dv}).permute({1, 2, 0, 3}).reshape({B, S, N * Dv});
}

at::Tensor MlaAttentionImpl::forward_cached(const at::Tensor& x, const LayerContext& ctx) {
  Projected p = project(x, ctx);
  if (!kv_b_proj->adapter) return o_proj->forward(latent_attention(p, ctx));
  auto [key, value] = expand(p);
  auto& state = ctx.cache->state<KvState>(this, [] { return std::make_unique<KvState>(); });
  return o_proj->forward(cached_attention(p.query, key, value, state, ctx));
}

double MlaAttentionImpl::decode_state_bytes(int64_t positions, int64_t dtype_bytes) const {
  // The latent and the rotated key; with an adapter on kv_b_proj, every head's key
  // (nope | rope) and value, expanded from the latent.
  if (!kv_b_proj->adapter) return double(positions) * double((kv_lora_rank + rope_dim) * dtype_bytes);
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
