// Independent float64 reference of the GLM-4.5 / GLM-4.6 forward pass (model_type
// "glm4_moe"), written from the Hugging Face transformers definitions as naive loops over
// rows, heads, tokens and experts. It shares no code with src/ and is meant only for tiny
// configurations.
//
// Sources read (huggingface/transformers, path @ commit as reported by the index):
//   src/transformers/models/glm4_moe/modeling_glm4_moe.py      @ a0699c971daff96403489086fcfd07469d20b17f
//   src/transformers/models/glm4_moe/configuration_glm4_moe.py @ c7ec229ad64cdcf0176f669969c66c9a652e7f38
//   src/transformers/models/glm4_moe/modular_glm4_moe.py       @ 008c726d1655845afb7ca71013b984ceac231e57
//     (the router is DeepseekV3TopkRouter's; DeepSeek-V3's later masking of excluded groups
//     with -inf instead of 0.0 applies to it alike)
//
// Facts this file relies on:
//  * Attention: q/k/v projections have a bias when attention_bias (the released GLM-4.5
//    configs set it); o_proj never has one. head_dim defaults to hidden / heads.
//  * use_qk_norm: an RMSNorm over head_dim (eps rms_norm_eps) on each query and key head,
//    applied before RoPE, after the view to heads.
//  * RoPE: rotary_dim = int(head_dim * partial_rotary_factor) (default 0.5) leading dims of
//    each head, rotate-half: pairs (i, i + R/2) rotated by inv_freq[i] = theta^(-2i/R); the
//    remaining head_dim - R dims pass unchanged. No scaling (rope_scaling null).
//  * Softmax scale head_dim^-0.5, causal, grouped keys/values shared by
//    heads / num_key_value_heads query heads each (repeat_kv).
//  * Layer l < first_k_dense_replace: a SwiGLU MLP of width intermediate_size. Otherwise: the
//    router (weights [E, H], float32 in transformers: logits = h . W^T, scores = sigmoid;
//    choice = scores + e_score_correction_bias; a group's score is the sum of its two best
//    choices; topk_group groups kept, others' experts masked; top num_experts_per_tok of the
//    choice; weights = the unbiased scores of those, divided by (sum + 1e-20) when
//    norm_topk_prob, times routed_scaling_factor), each expert a SwiGLU of width
//    moe_intermediate_size, plus shared experts: one SwiGLU of width
//    moe_intermediate_size * n_shared_experts on the same input.
//  * RMSNorm: x * rsqrt(mean(x^2) + eps) * weight, eps rms_norm_eps (default 1e-5).
//  * Pre-norm residual blocks; final norm; lm_head (the embedding when tied).
//  * Keys (per expert, as the releases store them): model.layers.L.self_attn.{q,k,v,o}_proj,
//    {q,k}_norm, mlp.{gate,up,down}_proj (dense), mlp.gate.weight,
//    mlp.gate.e_score_correction_bias, mlp.experts.E.{gate,up,down}_proj,
//    mlp.shared_experts.{gate,up,down}_proj.
//
// Shape legend: B rows, S tokens, H hidden, V vocab, Nh heads, Nkv key/value heads, D head_dim,
//   R rotary dims, E experts.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace glint::testing {

using Glm4MoeWeights = std::map<std::string, at::Tensor>;

struct Glm4MoeRefConfig {
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t intermediate = 10944, moe_intermediate = 1408, experts = 128, top_k = 8, shared = 1;
  int64_t n_group = 1, topk_group = 1, first_dense = 1;
  double scaling = 1.0, eps = 1e-5, theta = 10000.0, partial = 0.5;
  bool norm_topk = true, bias = false, qk_norm = false, tied = false;
};

inline Glm4MoeRefConfig glm4_moe_ref_config(const nlohmann::json& j) {
  Glm4MoeRefConfig c;
  auto get = [&](const char* k, auto def) { return j.contains(k) && !j[k].is_null() ? j[k].get<decltype(def)>() : def; };
  c.vocab = j.at("vocab_size").get<int64_t>();
  c.hidden = j.at("hidden_size").get<int64_t>();
  c.layers = j.at("num_hidden_layers").get<int64_t>();
  c.heads = j.at("num_attention_heads").get<int64_t>();
  c.kv_heads = get("num_key_value_heads", c.heads);
  c.head_dim = get("head_dim", c.hidden / c.heads);
  c.intermediate = get("intermediate_size", c.intermediate);
  c.moe_intermediate = get("moe_intermediate_size", c.moe_intermediate);
  c.experts = get("n_routed_experts", c.experts);
  c.top_k = get("num_experts_per_tok", c.top_k);
  c.shared = get("n_shared_experts", c.shared);
  c.n_group = get("n_group", c.n_group);
  c.topk_group = get("topk_group", c.topk_group);
  c.first_dense = get("first_k_dense_replace", c.first_dense);
  c.scaling = get("routed_scaling_factor", c.scaling);
  c.eps = get("rms_norm_eps", c.eps);
  c.theta = get("rope_theta", c.theta);
  c.partial = get("partial_rotary_factor", c.partial);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {  // transformers v5
    const auto& rp = j["rope_parameters"];
    if (rp.contains("rope_theta")) c.theta = rp["rope_theta"].get<double>();
    if (rp.contains("partial_rotary_factor")) c.partial = rp["partial_rotary_factor"].get<double>();
  }
  c.norm_topk = get("norm_topk_prob", c.norm_topk);
  c.bias = get("attention_bias", c.bias);
  c.qk_norm = get("use_qk_norm", c.qk_norm);
  c.tied = get("tie_word_embeddings", c.tied);
  return c;
}

namespace glm4_ref {

inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

inline at::Tensor linear(const Glm4MoeWeights& w, const std::string& name, const at::Tensor& x) {
  at::Tensor y = at::matmul(x, w.at(name + ".weight").t());
  auto b = w.find(name + ".bias");
  return b == w.end() ? y : y + b->second;
}

inline at::Tensor swiglu_mlp(const Glm4MoeWeights& w, const std::string& name, const at::Tensor& x) {
  at::Tensor g = linear(w, name + ".gate_proj", x), u = linear(w, name + ".up_proj", x);
  return linear(w, name + ".down_proj", g * at::sigmoid(g) * u);
}

// Rotate-half RoPE on the first R dims of one head vector x [D] at position p.
inline at::Tensor rope(const at::Tensor& x, int64_t p, int64_t R, double theta) {
  at::Tensor out = x.clone();
  for (int64_t i = 0; i < R / 2; ++i) {
    const double f = std::pow(theta, -2.0 * double(i) / double(R));
    const double c = std::cos(double(p) * f), s = std::sin(double(p) * f);
    at::Tensor a = x[i], b = x[i + R / 2];
    out[i] = a * c - b * s;
    out[i + R / 2] = b * c + a * s;
  }
  return out;
}

}  // namespace glm4_ref

// Logits [B, S, V] of token ids [B, S] (positions 0..S-1 in every row).
inline at::Tensor glm4_moe_reference_logits(const nlohmann::json& cfg, const Glm4MoeWeights& w,
                                            const at::Tensor& ids) {
  using namespace glm4_ref;
  const Glm4MoeRefConfig c = glm4_moe_ref_config(cfg);
  const int64_t B = ids.size(0), S = ids.size(1), D = c.head_dim, R = int64_t(double(D) * c.partial);
  const int64_t group = c.heads / c.kv_heads;
  at::Tensor h = w.at("model.embed_tokens.weight").index_select(0, ids.reshape({-1})).view({B, S, c.hidden});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    // Attention.
    at::Tensor x = rms_norm(h, w.at(p + "input_layernorm.weight"), c.eps);
    at::Tensor attn = at::zeros({B, S, c.heads * D}, h.options());
    for (int64_t b = 0; b < B; ++b) {
      at::Tensor q = linear(w, p + "self_attn.q_proj", x[b]).view({S, c.heads, D});
      at::Tensor k = linear(w, p + "self_attn.k_proj", x[b]).view({S, c.kv_heads, D});
      at::Tensor v = linear(w, p + "self_attn.v_proj", x[b]).view({S, c.kv_heads, D});
      if (c.qk_norm) {
        q = rms_norm(q, w.at(p + "self_attn.q_norm.weight"), c.eps);
        k = rms_norm(k, w.at(p + "self_attn.k_norm.weight"), c.eps);
      }
      std::vector<at::Tensor> qr(size_t(S * c.heads)), kr(size_t(S * c.kv_heads));
      for (int64_t t = 0; t < S; ++t) {
        for (int64_t n = 0; n < c.heads; ++n) qr[size_t(t * c.heads + n)] = rope(q[t][n], t, R, c.theta);
        for (int64_t n = 0; n < c.kv_heads; ++n) kr[size_t(t * c.kv_heads + n)] = rope(k[t][n], t, R, c.theta);
      }
      for (int64_t n = 0; n < c.heads; ++n) {
        const int64_t kv = n / group;
        for (int64_t t = 0; t < S; ++t) {
          std::vector<double> score(size_t(t + 1));
          double top = -std::numeric_limits<double>::infinity();
          for (int64_t u = 0; u <= t; ++u) {
            score[size_t(u)] = at::dot(qr[size_t(t * c.heads + n)], kr[size_t(u * c.kv_heads + kv)]).item<double>() /
                               std::sqrt(double(D));
            top = std::max(top, score[size_t(u)]);
          }
          double sum = 0;
          for (double& s : score) sum += (s = std::exp(s - top));
          at::Tensor o = at::zeros({D}, h.options());
          for (int64_t u = 0; u <= t; ++u) o = o + (score[size_t(u)] / sum) * v[u][kv];
          attn[b][t].narrow(0, n * D, D).copy_(o);
        }
      }
    }
    h = h + linear(w, p + "self_attn.o_proj", attn);
    // MLP or MoE.
    x = rms_norm(h, w.at(p + "post_attention_layernorm.weight"), c.eps);
    if (l < c.first_dense) {
      h = h + swiglu_mlp(w, p + "mlp", x);
      continue;
    }
    at::Tensor flat = x.reshape({B * S, c.hidden});
    at::Tensor scores = at::sigmoid(at::matmul(flat, w.at(p + "mlp.gate.weight").t()));  // [T, E]
    at::Tensor bias = w.count(p + "mlp.gate.e_score_correction_bias")
                          ? w.at(p + "mlp.gate.e_score_correction_bias").to(at::kDouble)
                          : at::zeros({c.experts}, at::kDouble);
    at::Tensor out = at::zeros_like(flat);
    const int64_t per = c.experts / c.n_group;
    for (int64_t t = 0; t < B * S; ++t) {
      std::vector<double> choice(size_t(c.experts));
      for (int64_t e = 0; e < c.experts; ++e) choice[size_t(e)] = scores[t][e].item<double>() + bias[e].item<double>();
      // Group-limited choice: a group scores the sum of its two best.
      std::vector<double> group_score(size_t(c.n_group));
      for (int64_t g = 0; g < c.n_group; ++g) {
        std::vector<double> in(choice.begin() + g * per, choice.begin() + (g + 1) * per);
        std::sort(in.begin(), in.end(), std::greater<double>());
        group_score[size_t(g)] = in[0] + (per > 1 ? in[1] : 0.0);
      }
      std::vector<int64_t> groups(size_t(c.n_group));
      std::iota(groups.begin(), groups.end(), 0);
      std::stable_sort(groups.begin(), groups.end(),
                       [&](int64_t a, int64_t b) { return group_score[size_t(a)] > group_score[size_t(b)]; });
      std::vector<bool> kept(size_t(c.n_group), false);
      for (int64_t i = 0; i < c.topk_group; ++i) kept[size_t(groups[size_t(i)])] = true;
      for (int64_t e = 0; e < c.experts; ++e)
        if (!kept[size_t(e / per)]) choice[size_t(e)] = -std::numeric_limits<double>::infinity();
      std::vector<int64_t> order(size_t(c.experts));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return choice[size_t(a)] > choice[size_t(b)]; });
      double total = 0;
      for (int64_t i = 0; i < c.top_k; ++i) total += scores[t][order[size_t(i)]].item<double>();
      for (int64_t i = 0; i < c.top_k; ++i) {
        const int64_t e = order[size_t(i)];
        double weight = scores[t][e].item<double>();
        if (c.norm_topk) weight /= total + 1e-20;
        weight *= c.scaling;
        out[t] += weight * swiglu_mlp(w, p + "mlp.experts." + std::to_string(e), flat[t]);
      }
    }
    if (c.shared > 0) out = out + swiglu_mlp(w, p + "mlp.shared_experts", flat);
    h = h + out.view({B, S, c.hidden});
  }
  h = rms_norm(h, w.at("model.norm.weight"), c.eps);
  const at::Tensor& head = c.tied ? w.at("model.embed_tokens.weight") : w.at("lm_head.weight");
  return at::matmul(h, head.t());
}

}  // namespace glint::testing
