#include "model/qwen3_5/attention.h"

#include <ATen/ATen.h>

#include <cmath>

#include "core/error.h"
#include "model/decode_cache.h"
#include "model/qwen3_5/gated_delta.h"
#include "model/qwen3_5/config.h"

namespace glint {

GatedAttentionImpl::GatedAttentionImpl(const ModelConfig& c, const TensorPlacement& p)
    : num_heads(c.num_attention_heads),
      num_kv_heads(c.num_key_value_heads),
      head_dim(c.head_dim),
      rotary_dim(int64_t(double(c.head_dim) * c.partial_rotary_factor)) {
  const int64_t H = c.hidden_size;
  q_proj = register_module("q_proj", Linear(H, num_heads * head_dim * 2, c.attention_bias, p));
  k_proj = register_module("k_proj", Linear(H, num_kv_heads * head_dim, c.attention_bias, p));
  v_proj = register_module("v_proj", Linear(H, num_kv_heads * head_dim, c.attention_bias, p));
  o_proj = register_module("o_proj", Linear(num_heads * head_dim, H, c.attention_bias, p));
  q_norm = register_module("q_norm", RMSNorm(head_dim, c.rms_norm_eps, p, /*unit_offset=*/true));
  k_norm = register_module("k_norm", RMSNorm(head_dim, c.rms_norm_eps, p, /*unit_offset=*/true));
}

std::array<at::Tensor, 4> GatedAttentionImpl::qkv_gate(const at::Tensor& x, const LayerContext& ctx) {
  const int64_t B = x.size(0), S = x.size(1), D = head_dim;
  // Per head [q | gate]: [B,S,Nh,2D] -> q, gate [B,S,Nh,D].
  std::vector<at::Tensor> qg = q_proj->forward(x).view({B, S, num_heads, 2 * D}).split(D, -1);
  at::Tensor q = q_norm->forward(qg[0]).transpose(1, 2);
  at::Tensor k = k_norm->forward(k_proj->forward(x).view({B, S, num_kv_heads, D})).transpose(1, 2);
  at::Tensor v = v_proj->forward(x).view({B, S, num_kv_heads, D}).transpose(1, 2);
  q = apply_partial_rotary(q, ctx.rope.at(0), rotary_dim);
  k = apply_partial_rotary(k, ctx.rope.at(0), rotary_dim);
  return {q, k, v, qg[1].reshape({B, S, num_heads * D})};
}

ActivationMemory GatedAttentionImpl::activation_memory(const ActivationShape& s) const {
  const double T = double(s.rows * s.seq_len), db = double(s.dtype_bytes);
  const int64_t Nh = num_heads, D = head_dim;
  // The usual sublayer (o_proj's input is the gated output), and: the gate half of
  // q_proj's output (kept with the query half the norm keeps), the attention output in
  // [B, S, Nh*D] order and sigmoid(gate), which the gating keeps.
  ActivationMemory m = projected_attention_memory(s, *q_proj, *k_proj, *v_proj, *o_proj, q_norm.get(), k_norm.get(),
                                                  Nh, num_kv_heads, D);
  const double per_token = db * double(Nh * D) * 3;
  m.saved += T * per_token;
  return m;
}

at::Tensor GatedAttentionImpl::forward(const at::Tensor& x, const LayerContext& ctx) {
  auto [q, k, v, gate] = qkv_gate(x, ctx);
  at::Tensor o = sequence_attention(q, k, v, ctx.layout);  // [B,S,Nh*D]
  return o_proj->forward(o * at::sigmoid(gate));
}

at::Tensor GatedAttentionImpl::forward_cached(const at::Tensor& x, const LayerContext& ctx) {
  auto [q, k, v, gate] = qkv_gate(x, ctx);
  auto& state = ctx.cache->state<KvState>(this, [] { return std::make_unique<KvState>(); });
  return o_proj->forward(cached_attention(q, k, v, state, ctx) * at::sigmoid(gate));
}

double GatedAttentionImpl::decode_state_bytes(int64_t positions, int64_t dtype_bytes) const {
  return kv_state_bytes(positions, num_kv_heads * head_dim, num_kv_heads * head_dim, dtype_bytes);
}

double GatedAttentionImpl::score_macs_per_token(int64_t seq_len) const {
  return 2.0 * double(seq_len) * double(head_dim) * double(num_heads);
}

ConvWeightImpl::ConvWeightImpl(int64_t channels, int64_t width, const TensorPlacement& p) {
  weight = register_parameter("weight", new_weight({channels, 1, width}, p));
}

GatedDeltaNetImpl::GatedDeltaNetImpl(const ModelConfig& c, const TensorPlacement& p, DeltaNetProjections f)
    : key_heads(delta_net(c).linear_num_key_heads),
      value_heads(delta_net(c).linear_num_value_heads),
      key_dim(delta_net(c).linear_key_head_dim),
      value_dim(delta_net(c).linear_value_head_dim),
      form(f) {
  const int64_t H = c.hidden_size, channels = 2 * key_heads * key_dim + value_heads * value_dim;
  GLINT_CHECK(key_heads > 0 && value_heads % key_heads == 0, "GatedDeltaNet: linear_num_value_heads (", value_heads,
              ") must be a multiple of linear_num_key_heads (", key_heads, ")");
  if (form == DeltaNetProjections::kFused) {
    in_proj_qkvz = register_module("in_proj_qkvz", Linear(H, channels + value_heads * value_dim, false, p));
    in_proj_ba = register_module("in_proj_ba", Linear(H, 2 * value_heads, false, p));
  } else {
    in_proj_qkv = register_module("in_proj_qkv", Linear(H, channels, false, p));
    in_proj_z = register_module("in_proj_z", Linear(H, value_heads * value_dim, false, p));
    in_proj_b = register_module("in_proj_b", Linear(H, value_heads, false, p));
    in_proj_a = register_module("in_proj_a", Linear(H, value_heads, false, p));
  }
  conv1d = register_module("conv1d", ConvWeight(channels, delta_net(c).linear_conv_kernel_dim, p));
  auto opts = at::TensorOptions().dtype(p.dtype).device(p.device);
  dt_bias = register_parameter("dt_bias", at::ones({value_heads}, opts));
  A_log = register_parameter("A_log", at::zeros({value_heads}, opts));
  norm = register_module("norm", RMSNorm(value_dim, c.rms_norm_eps, p));
  out_proj = register_module("out_proj", Linear(value_heads * value_dim, H, false, p));
}

GatedDeltaNetImpl::Projected GatedDeltaNetImpl::project(const at::Tensor& x) {
  const int64_t B = x.size(0), S = x.size(1), Hk = key_heads, Hv = value_heads, Dk = key_dim, Dv = value_dim;
  const int64_t r = Hv / Hk;
  Projected out;
  if (form == DeltaNetProjections::kSplit) {
    out.qkv = in_proj_qkv->forward(x);
    out.z = in_proj_z->forward(x).view({B, S, Hv, Dv});
    out.b = in_proj_b->forward(x);
    out.a = in_proj_a->forward(x);
    return out;
  }
  // Per key head [q | k | v (r heads) | z (r heads)] and [b (r) | a (r)]; the heads of
  // each part, taken in key-head order, are the split form's heads in order.
  std::vector<at::Tensor> qkvz =
      in_proj_qkvz->forward(x).view({B, S, Hk, 2 * Dk + 2 * r * Dv}).split_with_sizes({Dk, Dk, r * Dv, r * Dv}, -1);
  out.qkv = at::cat({qkvz[0].reshape({B, S, Hk * Dk}), qkvz[1].reshape({B, S, Hk * Dk}),
                     qkvz[2].reshape({B, S, Hv * Dv})},
                    -1);
  out.z = qkvz[3].reshape({B, S, Hv, Dv});
  std::vector<at::Tensor> ba = in_proj_ba->forward(x).view({B, S, Hk, 2 * r}).split(r, -1);
  out.b = ba[0].reshape({B, S, Hv});
  out.a = ba[1].reshape({B, S, Hv});
  return out;
}

GatedDeltaNetImpl::RuleInputs GatedDeltaNetImpl::rule_inputs(const at::Tensor& mixed, const Projected& in) {
  const int64_t B = mixed.size(0), S = mixed.size(1), Hk = key_heads, Hv = value_heads, Dk = key_dim,
                Dv = value_dim;
  std::vector<at::Tensor> qkv = mixed.split_with_sizes({Hk * Dk, Hk * Dk, Hv * Dv}, -1);
  auto compute = mixed.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor beta = at::sigmoid(in.b.to(compute));                                                // [B,S,Hv]
  at::Tensor g = -at::exp(A_log.to(compute)) * at::softplus(in.a.to(compute) + dt_bias.to(compute));
  return {qkv[0].view({B, S, Hk, Dk}), qkv[1].view({B, S, Hk, Dk}), qkv[2].view({B, S, Hv, Dv}), g, beta};
}

at::Tensor GatedDeltaNetImpl::output(const at::Tensor& o, const Projected& in, c10::ScalarType dtype) {
  const int64_t B = o.size(0), S = o.size(1);
  at::Tensor gated = norm->forward(o.to(dtype), in.z.to(dtype));
  return out_proj->forward(gated.reshape({B, S, value_heads * value_dim}));
}

ActivationMemory GatedDeltaNetImpl::activation_memory(const ActivationShape& s) const {
  const double T = double(s.rows * s.seq_len), db = double(s.dtype_bytes), cb = s.dtype_bytes == 8 ? 8 : 4;
  const double Hk = double(key_heads), Hv = double(value_heads), Dk = double(key_dim), Dv = double(value_dim);
  const double C = 2 * Hk * Dk + Hv * Dv;  // the convolved channels
  double adapters = 0;
  bool x_kept = false;
  for (const Linear& l : {in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, in_proj_qkvz, in_proj_ba})
    if (l) {
      adapters += l->adapter_kept_per_row();
      x_kept |= l->keeps_input();
    }
  double per_token = db * (adapters + out_proj->adapter_kept_per_row());
  if (x_kept) per_token += db * double(out_proj->out_features());
  // The convolution's output and its SiLU (whose q and k the L2 norms keep, as views where
  // the compute type is the model's, else as their own copies) and the norms; beta, and the
  // decay's softplus input and output.
  per_token += db * 2 * C + (cb == db ? 0 : cb * 2 * Hk * Dk) + cb * 2 * Hk + cb * 3 * Hv;
  // The convolution: the sequence offsets its masks are made from (packed rows), and with
  // a trained kernel its input (the projected channels).
  per_token += 8 + (conv1d->weight.requires_grad() ? cb * C : 0);
  per_token += gated_delta_rule_kept_bytes(s.seq_len, value_heads, key_dim, value_dim, s.dtype_bytes);
  // The output gate: the rule's output and z (kept by the norm), the norm's tensors, and on
  // ATen's operators silu(z) and the normalized output; the gated product where out_proj
  // keeps it.
  per_token += db * Hv * Dv * (norm->one_pass(s.dtype_bytes) ? 2 : 4) + Hv * norm->kept_bytes(s.dtype_bytes);
  if (out_proj->keeps_input()) per_token += db * Hv * Dv;
  ActivationMemory m;
  m.saved = T * per_token;
  m.working = T * gated_delta_rule_working_bytes(s.seq_len, value_heads, key_dim, value_dim, s.dtype_bytes);
  // Without gradients: the projections, the convolution and its SiLU, beside the rule's
  // forward.
  m.inference = T * (db * (3 * C + Hv * Dv) +
                     gated_delta_rule_forward_bytes(s.seq_len, value_heads, key_dim, value_dim, s.dtype_bytes));
  return m;
}

at::Tensor GatedDeltaNetImpl::forward(const at::Tensor& x, const LayerContext& ctx) {
  Projected in = project(x);
  at::Tensor mixed = causal_depthwise_conv1d(in.qkv, conv1d->weight, ctx.layout, /*silu=*/true);
  RuleInputs r = rule_inputs(mixed, in);
  at::Tensor o = gated_delta_rule(r.q, r.k, r.v, r.g, r.beta, ctx.layout, 64, nullptr, /*normalize_qk=*/true);
  return output(o, in, x.scalar_type());
}

namespace {
// GatedDeltaNet's decoding state per row.
struct DeltaNetState : LayerState {
  at::Tensor tail;   // [B,W-1,C]: the last W-1 convolution inputs (zeros before the row's start)
  at::Tensor state;  // [B,Hv,Dk,Dv]: the recurrent state, in the compute dtype
  std::vector<at::Tensor*> tensors() override { return {&tail, &state}; }
};
}  // namespace

at::Tensor GatedDeltaNetImpl::forward_cached(const at::Tensor& x, const LayerContext& ctx) {
  const DecodeCache& cache = *ctx.cache;
  const int64_t B = x.size(0), S = x.size(1), Hv = value_heads, Dk = key_dim, Dv = value_dim;
  const int64_t W = conv1d->weight.size(2), C = conv1d->weight.size(0);
  const auto compute = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto& st = ctx.cache->state<DeltaNetState>(this, [] { return std::make_unique<DeltaNetState>(); });
  if (!st.tail.defined()) {
    st.tail = at::zeros({B, W - 1, C}, x.options());
    st.state = at::zeros({B, Hv, Dk, Dv}, x.options().dtype(compute));
  }
  Projected in = project(x);
  // The convolution over [tail | new] [B,W-1+S,C], summed in causal_depthwise_conv1d's order.
  at::Tensor window = at::cat({st.tail, in.qkv}, 1).to(compute);
  at::Tensor w = conv1d->weight.to(compute).reshape({C, W});
  at::Tensor conv = window.narrow(1, W - 1, S) * w.select(1, W - 1);
  for (int64_t lag = 1; lag < W; ++lag) conv = conv + window.narrow(1, W - 1 - lag, S) * w.select(1, W - 1 - lag);
  at::Tensor mixed = at::silu(conv.to(x.scalar_type()));
  // Each row's new tail: the W-1 inputs before its first token that is not new.
  std::vector<int64_t> starts;
  for (int64_t n : cache.new_counts()) starts.push_back(n);
  at::Tensor from = at::tensor(starts, at::kLong).to(x.device()).view({B, 1}) +
                    at::arange(W - 1, at::TensorOptions().dtype(at::kLong).device(x.device())).view({1, W - 1});
  st.tail = at::cat({st.tail, in.qkv}, 1).gather(1, from.unsqueeze(-1).expand({B, W - 1, C}));

  RuleInputs r = rule_inputs(mixed, in);
  at::Tensor o;  // [B,S,Hv,Dv]
  if (cache.prefill()) {  // whole prompts: the chunked rule, which also returns where each row ends
    o = gated_delta_rule(r.q, r.k, r.v, r.g, r.beta, ctx.layout, 64, &st.state, /*normalize_qk=*/true);
  } else {  // token by token: St <- e^g St; delta = beta (v - St^T k); St += k delta^T; o = St^T q
    std::vector<at::Tensor> outs;
    auto [q, k] = normalized_qk(r.q, r.k, Hv);
    at::Tensor v = r.v.to(compute);
    at::Tensor decay = r.g.exp(), beta = r.beta;  // [B,S,Hv]
    for (int64_t t = 0; t < S; ++t) {
      at::Tensor kt = k.select(1, t).unsqueeze(-1);                                     // [B,Hv,Dk,1]
      at::Tensor s = st.state * decay.select(1, t).unsqueeze(-1).unsqueeze(-1);        // [B,Hv,Dk,Dv]
      at::Tensor remembered = (s * kt).sum(2);                                          // [B,Hv,Dv]
      at::Tensor delta = beta.select(1, t).unsqueeze(-1) * (v.select(1, t) - remembered);
      s = s + kt * delta.unsqueeze(2);
      outs.push_back((s * q.select(1, t).unsqueeze(-1)).sum(2));                       // [B,Hv,Dv]
      std::vector<int64_t> valid;
      for (int64_t n : cache.new_counts()) valid.push_back(t < n);
      at::Tensor keep = at::tensor(valid, at::kLong).gt(0).to(x.device()).view({B, 1, 1, 1});
      st.state = at::where(keep, s, st.state);
    }
    o = at::stack(outs, 1).to(x.scalar_type());
  }
  return output(o, in, x.scalar_type());
}

double GatedDeltaNetImpl::decode_state_bytes(int64_t, int64_t dtype_bytes) const {
  // DeltaNetState: the convolution's last W-1 inputs, and the recurrent state in the
  // compute dtype (float32 unless float64). Whatever the length.
  const int64_t W = conv1d->weight.size(2), C = conv1d->weight.size(0);
  const int64_t compute = dtype_bytes == 8 ? 8 : 4;
  return double((W - 1) * C * dtype_bytes + value_heads * key_dim * value_dim * compute);
}

double GatedDeltaNetImpl::score_macs_per_token(int64_t seq_len) const {
  // Chunks of 64: per token the state products (Dk x Dv, three times) and the in-chunk
  // products against up to 64 tokens.
  const double chunk = double(std::min<int64_t>(seq_len, 64));
  return double(value_heads) * (3.0 * key_dim * value_dim + chunk * (key_dim + value_dim));
}

}  // namespace glint
