// Independent float64 reference of the gpt-oss forward pass (model_type "gpt_oss"), written
// from the Hugging Face transformers definitions as naive loops over rows, heads, tokens and
// experts. It shares no code with src/ and is meant only for tiny configurations.
//
// Sources read (huggingface/transformers):
//   src/transformers/models/gpt_oss/modeling_gpt_oss.py, configuration_gpt_oss.py,
//   src/transformers/modeling_rope_utils.py (_compute_yarn_parameters),
//   src/transformers/masking_utils.py (sliding_window_overlay).
//
// Facts this file relies on:
//  * Attention: q/k/v/o projections all have biases. Softmax scale head_dim^-0.5; grouped
//    keys/values, heads / num_key_value_heads query heads each. Each head's learned sink
//    logit (self_attn.sinks [Nh]) joins the softmax over the visible keys and is dropped
//    after it: weights = exp(s_j) / (sum_j exp(s_j) + exp(sink)).
//  * layer_types[l] "sliding_attention": query i sees key j iff 0 <= i - j < sliding_window;
//    "full_attention": iff j <= i. Default layer_types: layer l sliding when (l + 1) % 2.
//  * RoPE: rotate-half over the whole head: pairs (i, i + D/2) rotated by angle p * inv_freq[i];
//    cos and sin multiplied by attention_factor. YaRN (rope_type "yarn"): pos_freqs =
//    theta^(2i/D); extrapolated 1/pos_freqs, interpolated 1/(factor pos_freqs); correction
//    dims d(r) = D ln(orig / (2 pi r)) / (2 ln theta) for r = beta_fast (low) and beta_slow
//    (high), floored / ceiled only when truncate (default true), clamped to [0, D - 1]; ramp
//    (i - low) / (high - low) clamped to [0, 1] (high += 0.001 when equal); extrapolation
//    weight 1 - ramp; attention_factor 0.1 ln(factor) + 1 for factor > 1.
//  * MoE, every layer: router logits = x W^T + b (mlp.router.{weight [E,H], bias [E]}); the
//    top num_experts_per_tok logits, softmax over them. Experts (input-major): gate_up =
//    x @ gate_up_proj[e] ([E, H, 2I]) + gate_up_proj_bias[e]; gate = gate_up[0::2], up =
//    gate_up[1::2]; gate = min(gate, limit), up = clamp(up, -limit, limit); glu = gate *
//    sigmoid(1.702 gate); out = ((up + 1) * glu) @ down_proj[e] ([E, I, H]) + down_proj_bias[e].
//  * RMSNorm: x * rsqrt(mean(x^2) + eps) * weight. Pre-norm residual blocks; final norm; lm_head.
//
// Shape legend: B rows, S tokens, H hidden, V vocab, Nh heads, Nkv key/value heads, D head_dim,
//   E experts, I expert width.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace glint::testing {

using GptOssWeights = std::map<std::string, at::Tensor>;

struct GptOssRefConfig {
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 64;
  int64_t experts = 128, top_k = 4, window = 128;
  double eps = 1e-5, theta = 150000.0, limit = 7.0;
  std::vector<std::string> layer_types;
  bool yarn = false, truncate = true, tied = false;
  double factor = 1.0, beta_fast = 32.0, beta_slow = 1.0, orig_max = 4096;
};

inline GptOssRefConfig gpt_oss_ref_config(const nlohmann::json& j) {
  GptOssRefConfig c;
  auto get = [&](const nlohmann::json& o, const char* k, auto def) {
    return o.contains(k) && !o[k].is_null() ? o[k].get<decltype(def)>() : def;
  };
  c.vocab = j.at("vocab_size").get<int64_t>();
  c.hidden = j.at("hidden_size").get<int64_t>();
  c.layers = j.at("num_hidden_layers").get<int64_t>();
  c.heads = j.at("num_attention_heads").get<int64_t>();
  c.kv_heads = get(j, "num_key_value_heads", c.heads);
  c.head_dim = get(j, "head_dim", c.head_dim);
  c.experts = get(j, "num_local_experts", c.experts);
  c.top_k = get(j, "num_experts_per_tok", c.top_k);
  c.window = get(j, "sliding_window", c.window);
  c.eps = get(j, "rms_norm_eps", c.eps);
  c.theta = get(j, "rope_theta", c.theta);
  c.limit = get(j, "swiglu_limit", c.limit);
  c.tied = get(j, "tie_word_embeddings", c.tied);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    c.layer_types = j["layer_types"].get<std::vector<std::string>>();
  } else {
    for (int64_t l = 0; l < c.layers; ++l) c.layer_types.push_back((l + 1) % 2 ? "sliding_attention" : "full_attention");
  }
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(key) || !j[key].is_object()) continue;
    const auto& r = j[key];
    c.theta = get(r, "rope_theta", c.theta);
    if (get(r, "rope_type", get(r, "type", std::string("default"))) != "yarn") continue;
    c.yarn = true;
    c.factor = get(r, "factor", c.factor);
    c.beta_fast = get(r, "beta_fast", c.beta_fast);
    c.beta_slow = get(r, "beta_slow", c.beta_slow);
    c.truncate = get(r, "truncate", c.truncate);
    c.orig_max = double(get(r, "original_max_position_embeddings", int64_t(4096)));
  }
  return c;
}

namespace gpt_oss_ref {

inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

inline at::Tensor linear(const GptOssWeights& w, const std::string& name, const at::Tensor& x) {
  return at::matmul(x, w.at(name + ".weight").t()) + w.at(name + ".bias");
}

// inv_freq [D/2] and the factor on cos and sin.
inline std::pair<std::vector<double>, double> rope_frequencies(const GptOssRefConfig& c) {
  const int64_t D = c.head_dim;
  std::vector<double> inv(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) inv[size_t(i)] = 1.0 / std::pow(c.theta, double(2 * i) / double(D));
  if (!c.yarn) return {inv, 1.0};
  auto correction_dim = [&](double rotations) {
    return double(D) * std::log(c.orig_max / (rotations * 2.0 * M_PI)) / (2.0 * std::log(c.theta));
  };
  double low = correction_dim(c.beta_fast), high = correction_dim(c.beta_slow);
  if (c.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, double(D - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < D / 2; ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;
    const double extra = inv[size_t(i)], inter = inv[size_t(i)] / c.factor;
    inv[size_t(i)] = inter * (1.0 - extrapolation) + extra * extrapolation;
  }
  return {inv, c.factor > 1.0 ? 0.1 * std::log(c.factor) + 1.0 : 1.0};
}

// Rotate-half RoPE of one head vector x [D] at position p.
inline at::Tensor rope(const at::Tensor& x, int64_t p, const std::vector<double>& inv, double scale) {
  const int64_t half = x.size(0) / 2;
  at::Tensor out = x.clone();
  for (int64_t i = 0; i < half; ++i) {
    const double c = std::cos(double(p) * inv[size_t(i)]) * scale, s = std::sin(double(p) * inv[size_t(i)]) * scale;
    at::Tensor a = x[i], b = x[i + half];
    out[i] = a * c - b * s;
    out[i + half] = b * c + a * s;
  }
  return out;
}

}  // namespace gpt_oss_ref

// Logits [B, S, V] of token ids [B, S] (positions 0..S-1 in every row, one sequence per row).
inline at::Tensor gpt_oss_reference_logits(const nlohmann::json& cfg, const GptOssWeights& w, const at::Tensor& ids) {
  using namespace gpt_oss_ref;
  const GptOssRefConfig c = gpt_oss_ref_config(cfg);
  const int64_t B = ids.size(0), S = ids.size(1), D = c.head_dim, group = c.heads / c.kv_heads;
  const auto [inv, rope_scale] = rope_frequencies(c);
  at::Tensor h = w.at("model.embed_tokens.weight").index_select(0, ids.reshape({-1})).view({B, S, c.hidden});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const bool sliding = c.layer_types.at(size_t(l)) == "sliding_attention";
    at::Tensor x = rms_norm(h, w.at(p + "input_layernorm.weight"), c.eps);
    at::Tensor attn = at::zeros({B, S, c.heads * D}, h.options());
    const at::Tensor& sinks = w.at(p + "self_attn.sinks");
    for (int64_t b = 0; b < B; ++b) {
      at::Tensor q = linear(w, p + "self_attn.q_proj", x[b]).view({S, c.heads, D});
      at::Tensor k = linear(w, p + "self_attn.k_proj", x[b]).view({S, c.kv_heads, D});
      at::Tensor v = linear(w, p + "self_attn.v_proj", x[b]).view({S, c.kv_heads, D});
      for (int64_t n = 0; n < c.heads; ++n) {
        const int64_t kv = n / group;
        const double sink = sinks[n].item<double>();
        for (int64_t t = 0; t < S; ++t) {
          at::Tensor qt = rope(q[t][n], t, inv, rope_scale);
          const int64_t first = sliding ? std::max<int64_t>(0, t - c.window + 1) : 0;
          std::vector<double> score;
          double top = sink;
          for (int64_t u = first; u <= t; ++u) {
            score.push_back(at::dot(qt, rope(k[u][kv], u, inv, rope_scale)).item<double>() / std::sqrt(double(D)));
            top = std::max(top, score.back());
          }
          double sum = std::exp(sink - top);
          for (double& s : score) sum += (s = std::exp(s - top));
          at::Tensor o = at::zeros({D}, h.options());
          for (int64_t u = first; u <= t; ++u) o = o + (score[size_t(u - first)] / sum) * v[u][kv];
          attn[b][t].narrow(0, n * D, D).copy_(o);
        }
      }
    }
    h = h + linear(w, p + "self_attn.o_proj", attn);
    x = rms_norm(h, w.at(p + "post_attention_layernorm.weight"), c.eps);
    at::Tensor flat = x.reshape({B * S, c.hidden});
    at::Tensor logits = linear(w, p + "mlp.router", flat);  // [T, E]
    const at::Tensor &gate_up = w.at(p + "mlp.experts.gate_up_proj"), &gate_up_bias = w.at(p + "mlp.experts.gate_up_proj_bias");
    const at::Tensor &down = w.at(p + "mlp.experts.down_proj"), &down_bias = w.at(p + "mlp.experts.down_proj_bias");
    at::Tensor out = at::zeros_like(flat);
    for (int64_t t = 0; t < B * S; ++t) {
      std::vector<int64_t> order(size_t(c.experts));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return logits[t][a].item<double>() > logits[t][b].item<double>(); });
      double top = logits[t][order[0]].item<double>(), total = 0;
      std::vector<double> weight(size_t(c.top_k));
      for (int64_t i = 0; i < c.top_k; ++i) total += (weight[size_t(i)] = std::exp(logits[t][order[size_t(i)]].item<double>() - top));
      for (int64_t i = 0; i < c.top_k; ++i) {
        const int64_t e = order[size_t(i)];
        at::Tensor gu = at::matmul(flat[t], gate_up[e]) + gate_up_bias[e];  // [2I]
        const int64_t I = gu.size(0) / 2;
        at::Tensor g = at::zeros({I}, gu.options()), u = at::zeros({I}, gu.options());
        for (int64_t j = 0; j < I; ++j) {
          g[j] = std::min(gu[2 * j].item<double>(), c.limit);
          u[j] = std::clamp(gu[2 * j + 1].item<double>(), -c.limit, c.limit);
        }
        at::Tensor act = (u + 1.0) * g * at::sigmoid(g * 1.702);
        out[t] += (weight[size_t(i)] / total) * (at::matmul(act, down[e]) + down_bias[e]);
      }
    }
    h = h + out.view({B, S, c.hidden});
  }
  h = rms_norm(h, w.at("model.norm.weight"), c.eps);
  const at::Tensor& head = c.tied ? w.at("model.embed_tokens.weight") : w.at("lm_head.weight");
  return at::matmul(h, head.t());
}

}  // namespace glint::testing
