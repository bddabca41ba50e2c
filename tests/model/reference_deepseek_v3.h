// Independent float64 reference of the DeepSeek-V3 forward pass (model_type "deepseek_v3"),
// written as naive loops over tokens, heads and experts from the Hugging Face transformers
// definitions. It shares no code with src/ and is meant only for tiny configurations.
//
// Sources read (huggingface/transformers, path @ commit as reported by the index):
//   src/transformers/models/deepseek_v3/modeling_deepseek_v3.py   @ 00b676f8f0489b88652a31d70751cc540dd06305
//   src/transformers/models/deepseek_v3/modeling_deepseek_v3.py   @ f5a9ec512fa9fe69e51ea0c6388c68d50de567b3
//   src/transformers/models/deepseek_v3/modular_deepseek_v3.py    @ dfd9abc2202c0f675992c5aa88874ceb33e0895c
//   src/transformers/models/deepseek_v3/configuration_deepseek_v3.py @ 001f85b38fb432858ace93f18622f07cec46d874
//     (the v5 config: `rope_parameters`, `rope_interleave`, head_dim = qk_rope_head_dim)
//   src/transformers/modeling_rope_utils.py @ ef46806472a64b0013ed413781e3afed82bfa047 and
//     @ 0044e3b3facff1a1ad60b235c69d5b45beae75a4 (older YaRN, no mscale), plus the v5 text of
//     _compute_yarn_parameters / standardize_rope_params (mscale, truncate, explicit factor).
//   Issue huggingface/transformers#45440 and PR #45441 (router masking changed from 0.0 to -inf).
//
// Facts this file relies on (each easy to get wrong):
//  * q_a_layernorm and kv_a_layernorm are built without an eps argument, so they always use
//    1e-6; only input_layernorm, post_attention_layernorm and model.norm use rms_norm_eps.
//  * attention_bias adds a bias to q_a_proj, kv_a_proj_with_mqa and o_proj only. q_proj (the
//    q_lora_rank == null path), q_b_proj and kv_b_proj never have one.
//  * kv_a_proj_with_mqa -> [c (kv_lora_rank) | k_rope (qk_rope_head_dim)]. Only c goes through
//    kv_a_layernorm and kv_b_proj; k_rope is rotated as is and shared by every head.
//    kv_b_proj rows are per head [k_nope (qk_nope_head_dim) | v (v_head_dim)]; q rows per head
//    [q_nope | q_rope]. num_key_value_heads plays no part.
//  * RoPE covers qk_rope_head_dim dims (config.head_dim is set to qk_rope_head_dim).
//    rope_interleave (default true) rotates the pairs (2i, 2i+1) by inv_freq[i] and returns them
//    de-interleaved: [rotated even dims | rotated odd dims]. With rope_interleave false the pairs
//    are (i, i + R/2) (rotate-half). q.k is unchanged by the layout, the pairing is what matters.
//  * YaRN: inv_freq[i] = interp[i] * ramp[i] + extrap[i] * (1 - ramp[i]), extrap = theta^(-2i/R),
//    interp = extrap / factor, ramp[i] = clamp((i - low) / (high - low), 0, 1) with
//    low/high = floor/ceil (when truncate, default true) of
//    R * ln(orig_max / (beta * 2 pi)) / (2 ln theta) for beta_fast / beta_slow, clamped to
//    [0, R-1]; high += 0.001 when low == high. beta_fast/beta_slow that are absent or 0 become
//    32/1. orig_max = original_max_position_embeddings, defaulting to max_position_embeddings.
//    The explicit `factor` is used (transformers 4.5x instead replaced it by
//    max_position_embeddings / original_max_position_embeddings; v5 warns and keeps factor).
//  * cos and sin are both multiplied by the YaRN attention_factor, so q_rope and k_rope are each
//    scaled by it: attention_factor = get_mscale(f, mscale) / get_mscale(f, mscale_all_dim)
//    when both mscale and mscale_all_dim are non-zero, else get_mscale(f) (mscale 1), unless the
//    config sets attention_factor. get_mscale(s, m) = 1 for s <= 1, else 0.1 m ln(s) + 1.
//    For the released V3 config (mscale = mscale_all_dim = 1) it is exactly 1.
//  * Softmax scale = qk_head_dim^-0.5, times get_mscale(factor, mscale_all_dim)^2 when the rope
//    type is not "default" and mscale_all_dim is non-zero. Causal, no other mask.
//  * Config spelling: v5 writes `rope_parameters` {rope_type, rope_theta, factor, ...}; released
//    checkpoints write `rope_scaling` {type | rope_type, ...} and a top-level rope_theta. When both
//    are present rope_scaling wins; a rope_theta inside the dict wins over the top-level one.
//  * Router: logits = h . gate.weight^T (float32 in transformers, float64 here); scores =
//    sigmoid; choice = scores + e_score_correction_bias (zeros when absent); group score = sum of
//    the group's two best choice scores; keep topk_group groups; set the other experts' choice
//    to the mask value; take top num_experts_per_tok; weights = the unbiased sigmoid scores of
//    those experts, divided by (their sum + 1e-20) when norm_topk_prob, then always multiplied by
//    routed_scaling_factor. config keys scoring_func / topk_method are not read by transformers.
//  * Mask value: 0.0 in every transformers commit listed above; PR #45441 (April 2026) changed it
//    to -inf to match DeepSeek's own modeling code, because a negative correction bias can push
//    kept experts below 0.0 and let a masked expert win. Default here: -inf
//    (DeepseekV3RefOptions::masked_choice_score selects 0.0 for the older behaviour). Ties are
//    broken towards the lower expert / group index.
//  * A layer is MoE iff layer_idx >= first_k_dense_replace; transformers does not read
//    moe_layer_freq, so neither does this file. Shared experts are one SwiGLU of width
//    moe_intermediate_size * n_shared_experts on the same normed input, added to the routed sum.
//  * Layers at index >= num_hidden_layers (the released MTP layer 61) are never read.
//  * Missing config keys take the DeepseekV3Config defaults (q_lora_rank 1536, n_group 8, ...).
//
// Shape legend: B batch rows, S tokens per row, H hidden_size, V vocab_size, Nh heads,
//   Dn qk_nope_head_dim, R qk_rope_head_dim, Dv v_head_dim, Cq q_lora_rank, Ckv kv_lora_rank,
//   E n_routed_experts, I / Im intermediate_size / moe_intermediate_size.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "reference.h"

namespace glint::testing {

using DeepseekV3Weights = std::map<std::string, at::Tensor>;

// Which value the router writes into the choice scores of experts outside the kept groups.
struct DeepseekV3RefOptions {
  double masked_choice_score = -std::numeric_limits<double>::infinity();
};

// get_mscale of the DeepSeek YaRN code.
inline double yarn_get_mscale_ref(double scale, double mscale = 1.0) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// YaRN inverse frequencies for a rotary width `dim` (R/2 values).
inline std::vector<double> yarn_inv_freq_ref(int64_t dim, double theta, double factor,
                                             double original_max_position_embeddings,
                                             double beta_fast = 32.0, double beta_slow = 1.0,
                                             bool truncate = true) {
  const double kPi = 3.14159265358979323846;
  auto correction_dim = [&](double rotations) {
    return double(dim) * std::log(original_max_position_embeddings / (rotations * 2.0 * kPi)) /
           (2.0 * std::log(theta));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // the transformers guard against a zero-width ramp
  std::vector<double> inv(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) {
    double extrap = std::pow(theta, -2.0 * double(i) / double(dim));
    double interp = extrap / factor;
    double ramp = std::min(1.0, std::max(0.0, (double(i) - low) / (high - low)));
    inv[i] = interp * ramp + extrap * (1.0 - ramp);
  }
  return inv;
}

// Plain RoPE inverse frequencies theta^(-2i/dim).
inline std::vector<double> default_inv_freq_ref(int64_t dim, double theta) {
  std::vector<double> inv(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) inv[i] = std::pow(theta, -2.0 * double(i) / double(dim));
  return inv;
}

// Everything the forward pass reads from config.json, with DeepseekV3Config defaults.
struct DeepseekV3RefConfig {
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0;
  int64_t q_lora_rank = 0;  // 0: q_lora_rank was null -> plain q_proj
  int64_t kv_lora_rank = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
  int64_t intermediate = 0, moe_intermediate = 0;
  int64_t n_routed = 0, n_shared = 0, n_group = 1, topk_group = 1, top_k = 1, first_k_dense = 0;
  bool norm_topk_prob = true, attention_bias = false, rope_interleave = true, tie_embeddings = false;
  double routed_scaling_factor = 1.0, rms_eps = 1e-6;
  // RoPE, resolved from rope_scaling / rope_parameters.
  std::string rope_type = "default";
  double rope_theta = 10000.0, rope_factor = 1.0;
  std::vector<double> inv_freq;     // [R/2]
  double attention_factor = 1.0;    // multiplies cos and sin
  double softmax_scale = 1.0;       // qk_head_dim^-0.5 (x mscale^2 under YaRN)
  int64_t qk_head() const { return qk_nope + qk_rope; }
};

namespace deepseek_v3_ref_detail {

inline bool has(const nlohmann::json& j, const char* k) { return j.contains(k) && !j.at(k).is_null(); }
inline double num(const nlohmann::json& j, const char* k, double dflt) {
  return has(j, k) ? j.at(k).get<double>() : dflt;
}
inline int64_t inum(const nlohmann::json& j, const char* k, int64_t dflt) {
  return has(j, k) ? j.at(k).get<int64_t>() : dflt;
}
inline bool flag(const nlohmann::json& j, const char* k, bool dflt) { return has(j, k) ? j.at(k).get<bool>() : dflt; }

inline at::Tensor get(const DeepseekV3Weights& w, const std::string& k) {
  auto it = w.find(k);
  if (it == w.end()) throw std::runtime_error("deepseek_v3 reference: missing weight " + k);
  return it->second.detach().to(at::kDouble).contiguous();
}
inline at::Tensor get_opt(const DeepseekV3Weights& w, const std::string& k) {
  auto it = w.find(k);
  return it == w.end() ? at::Tensor() : it->second.detach().to(at::kDouble).contiguous();
}
// y = W x (+ b), W [out, in].
inline at::Tensor linear(const at::Tensor& W, const at::Tensor& b, const at::Tensor& x) {
  at::Tensor y = at::mv(W, x);
  return b.defined() ? y + b : y;
}
inline std::vector<double> vec(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kDouble).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}
inline at::Tensor tensor(const std::vector<double>& v) {
  at::Tensor t = at::empty({int64_t(v.size())}, at::kDouble);
  std::copy(v.begin(), v.end(), t.data_ptr<double>());
  return t;
}

}  // namespace deepseek_v3_ref_detail

// Parses a deepseek_v3 config.json (either RoPE spelling) into the reference's view of it.
inline DeepseekV3RefConfig deepseek_v3_ref_config(const nlohmann::json& j) {
  using namespace deepseek_v3_ref_detail;
  DeepseekV3RefConfig c;
  c.vocab = inum(j, "vocab_size", 129280);
  c.hidden = inum(j, "hidden_size", 7168);
  c.layers = inum(j, "num_hidden_layers", 61);
  c.heads = inum(j, "num_attention_heads", 128);
  // An explicit null means "no q LoRA"; an absent key takes the class default.
  c.q_lora_rank = j.contains("q_lora_rank") ? (j.at("q_lora_rank").is_null() ? 0 : j.at("q_lora_rank").get<int64_t>())
                                            : 1536;
  c.kv_lora_rank = inum(j, "kv_lora_rank", 512);
  c.qk_nope = inum(j, "qk_nope_head_dim", 128);
  c.qk_rope = inum(j, "qk_rope_head_dim", 64);
  c.v_head = inum(j, "v_head_dim", 128);
  c.intermediate = inum(j, "intermediate_size", 18432);
  c.moe_intermediate = inum(j, "moe_intermediate_size", 2048);
  c.n_routed = inum(j, "n_routed_experts", 256);
  c.n_shared = inum(j, "n_shared_experts", 1);
  c.n_group = inum(j, "n_group", 8);
  c.topk_group = inum(j, "topk_group", 4);
  c.top_k = inum(j, "num_experts_per_tok", 8);
  c.first_k_dense = inum(j, "first_k_dense_replace", 3);
  c.norm_topk_prob = flag(j, "norm_topk_prob", true);
  c.attention_bias = flag(j, "attention_bias", false);
  c.rope_interleave = flag(j, "rope_interleave", true);
  c.tie_embeddings = flag(j, "tie_word_embeddings", false);
  c.routed_scaling_factor = num(j, "routed_scaling_factor", 2.5);
  c.rms_eps = num(j, "rms_norm_eps", 1e-6);
  if (has(j, "hidden_act") && j.at("hidden_act").get<std::string>() != "silu")
    throw std::runtime_error("deepseek_v3 reference: only hidden_act silu is modelled");
  if (c.qk_rope % 2 != 0) throw std::runtime_error("deepseek_v3 reference: odd qk_rope_head_dim");

  // rope_scaling (checkpoint spelling) wins over rope_parameters (v5 spelling).
  nlohmann::json rp = nlohmann::json::object();
  if (has(j, "rope_scaling") && j.at("rope_scaling").is_object() && !j.at("rope_scaling").empty())
    rp = j.at("rope_scaling");
  else if (has(j, "rope_parameters") && j.at("rope_parameters").is_object())
    rp = j.at("rope_parameters");
  c.rope_type = has(rp, "rope_type") ? rp.at("rope_type").get<std::string>()
                : has(rp, "type")    ? rp.at("type").get<std::string>()
                                     : "default";
  c.rope_theta = has(rp, "rope_theta") ? rp.at("rope_theta").get<double>() : num(j, "rope_theta", 10000.0);
  c.softmax_scale = 1.0 / std::sqrt(double(c.qk_head()));
  if (c.rope_type == "default") {
    c.inv_freq = default_inv_freq_ref(c.qk_rope, c.rope_theta);
    c.attention_factor = 1.0;
  } else if (c.rope_type == "yarn") {
    double max_pos = num(j, "max_position_embeddings", 4096);
    double orig = has(rp, "original_max_position_embeddings") ? rp.at("original_max_position_embeddings").get<double>()
                                                             : num(j, "original_max_position_embeddings", max_pos);
    c.rope_factor = has(rp, "factor") ? rp.at("factor").get<double>() : max_pos / orig;
    // `x or default` in Python: 0 and null both fall back.
    double beta_fast = num(rp, "beta_fast", 0.0), beta_slow = num(rp, "beta_slow", 0.0);
    if (beta_fast == 0.0) beta_fast = 32.0;
    if (beta_slow == 0.0) beta_slow = 1.0;
    double mscale = num(rp, "mscale", 0.0), mscale_all_dim = num(rp, "mscale_all_dim", 0.0);
    c.inv_freq = yarn_inv_freq_ref(c.qk_rope, c.rope_theta, c.rope_factor, orig, beta_fast, beta_slow,
                                   flag(rp, "truncate", true));
    if (has(rp, "attention_factor"))
      c.attention_factor = rp.at("attention_factor").get<double>();
    else if (mscale != 0.0 && mscale_all_dim != 0.0)
      c.attention_factor =
          yarn_get_mscale_ref(c.rope_factor, mscale) / yarn_get_mscale_ref(c.rope_factor, mscale_all_dim);
    else
      c.attention_factor = yarn_get_mscale_ref(c.rope_factor);
    if (mscale_all_dim != 0.0) {
      double m = yarn_get_mscale_ref(c.rope_factor, mscale_all_dim);
      c.softmax_scale *= m * m;
    }
  } else {
    throw std::runtime_error("deepseek_v3 reference: rope type " + c.rope_type + " is not modelled");
  }
  return c;
}

// Rotates one rope vector x [R] at position `pos`; output in the transformers layout (see top).
inline at::Tensor deepseek_v3_rope_ref(const at::Tensor& x, int64_t pos, const std::vector<double>& inv_freq,
                                       double attention_factor, bool interleave) {
  using namespace deepseek_v3_ref_detail;
  std::vector<double> v = vec(x);
  const int64_t R = int64_t(v.size()), half = R / 2;
  std::vector<double> out(R);
  for (int64_t i = 0; i < half; ++i) {
    double angle = double(pos) * inv_freq[i];
    double c = std::cos(angle) * attention_factor, s = std::sin(angle) * attention_factor;
    double a = interleave ? v[2 * i] : v[i];
    double b = interleave ? v[2 * i + 1] : v[i + half];
    out[i] = a * c - b * s;
    out[i + half] = b * c + a * s;
  }
  return tensor(out);
}

// Group-limited sigmoid routing of one token x [H] with router_w [E,H] and correction bias [E]
// (undefined = zeros). Returns (expert, weight) pairs, best choice score first.
inline std::vector<std::pair<int64_t, double>> deepseek_v3_route_ref(
    const at::Tensor& router_w, const at::Tensor& correction_bias, const at::Tensor& x, int64_t top_k,
    int64_t n_group, int64_t topk_group, bool norm_topk_prob, double routed_scaling_factor,
    double masked_choice_score = -std::numeric_limits<double>::infinity()) {
  using namespace deepseek_v3_ref_detail;
  const int64_t E = router_w.size(0);
  if (n_group < 1 || E % n_group != 0 || E / n_group < 2 || topk_group > n_group || top_k > E)
    throw std::runtime_error("deepseek_v3 reference: bad routing shape");
  const int64_t G = E / n_group;
  std::vector<double> logits = vec(at::mv(router_w.detach().to(at::kDouble), x.detach().to(at::kDouble)));
  std::vector<double> bias = correction_bias.defined() ? vec(correction_bias) : std::vector<double>(E, 0.0);
  std::vector<double> score(E), choice(E);
  for (int64_t e = 0; e < E; ++e) {
    score[e] = 1.0 / (1.0 + std::exp(-logits[e]));
    choice[e] = score[e] + bias[e];
  }
  // Group score: sum of the two best choice scores inside the group.
  std::vector<double> gscore(n_group);
  for (int64_t g = 0; g < n_group; ++g) {
    std::vector<double> m(choice.begin() + g * G, choice.begin() + (g + 1) * G);
    std::partial_sort(m.begin(), m.begin() + 2, m.end(), std::greater<double>());
    gscore[g] = m[0] + m[1];
  }
  std::vector<int64_t> gidx(n_group);
  std::iota(gidx.begin(), gidx.end(), 0);
  std::stable_sort(gidx.begin(), gidx.end(), [&](int64_t a, int64_t b) { return gscore[a] > gscore[b]; });
  std::vector<bool> kept(n_group, false);
  for (int64_t i = 0; i < topk_group; ++i) kept[gidx[i]] = true;
  std::vector<double> masked(E);
  for (int64_t e = 0; e < E; ++e) masked[e] = kept[e / G] ? choice[e] : masked_choice_score;
  std::vector<int64_t> eidx(E);
  std::iota(eidx.begin(), eidx.end(), 0);
  std::stable_sort(eidx.begin(), eidx.end(), [&](int64_t a, int64_t b) { return masked[a] > masked[b]; });
  double sum = 0;
  for (int64_t i = 0; i < top_k; ++i) sum += score[eidx[i]];
  std::vector<std::pair<int64_t, double>> out;
  for (int64_t i = 0; i < top_k; ++i) {
    double w = score[eidx[i]];
    if (norm_topk_prob) w /= sum + 1e-20;
    out.emplace_back(eidx[i], w * routed_scaling_factor);
  }
  return out;
}

// MLA self-attention of one row: x [S,H] (already input-normed), positions 0..S-1 -> [S,H].
inline at::Tensor deepseek_v3_attention_ref(const DeepseekV3RefConfig& c, const DeepseekV3Weights& w,
                                            int64_t layer, const at::Tensor& x_in) {
  using namespace deepseek_v3_ref_detail;
  const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
  auto bias = [&](const std::string& k) { return c.attention_bias ? get_opt(w, p + k + ".bias") : at::Tensor(); };
  at::Tensor x = x_in.detach().to(at::kDouble);
  const int64_t S = x.size(0), Nh = c.heads, Dn = c.qk_nope, R = c.qk_rope, Dv = c.v_head, Dq = c.qk_head();
  at::Tensor Wq, Wqa, bqa, qa_norm, Wqb;
  if (c.q_lora_rank == 0) {
    Wq = get(w, p + "q_proj.weight");
  } else {
    Wqa = get(w, p + "q_a_proj.weight");
    bqa = bias("q_a_proj");
    qa_norm = get(w, p + "q_a_layernorm.weight");
    Wqb = get(w, p + "q_b_proj.weight");
  }
  at::Tensor Wkva = get(w, p + "kv_a_proj_with_mqa.weight"), bkva = bias("kv_a_proj_with_mqa");
  at::Tensor kva_norm = get(w, p + "kv_a_layernorm.weight"), Wkvb = get(w, p + "kv_b_proj.weight");
  at::Tensor Wo = get(w, p + "o_proj.weight"), bo = bias("o_proj");

  // Per token: q [Nh*Dq], per-head k_nope / v from kv_b [Nh*(Dn+Dv)], shared rotated k_rope [R].
  std::vector<at::Tensor> q(S), kvb(S), k_rope(S);
  for (int64_t t = 0; t < S; ++t) {
    q[t] = c.q_lora_rank == 0 ? at::mv(Wq, x[t])
                              : at::mv(Wqb, rms_norm_ref(linear(Wqa, bqa, x[t]), qa_norm, 1e-6));
    at::Tensor kva = linear(Wkva, bkva, x[t]);
    kvb[t] = at::mv(Wkvb, rms_norm_ref(kva.narrow(0, 0, c.kv_lora_rank), kva_norm, 1e-6));
    k_rope[t] = deepseek_v3_rope_ref(kva.narrow(0, c.kv_lora_rank, R), t, c.inv_freq, c.attention_factor,
                                     c.rope_interleave);
  }
  at::Tensor heads = at::zeros({S, Nh * Dv}, at::kDouble);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t h = 0; h < Nh; ++h) {
      at::Tensor q_nope = q[i].narrow(0, h * Dq, Dn);
      at::Tensor q_rope = deepseek_v3_rope_ref(q[i].narrow(0, h * Dq + Dn, R), i, c.inv_freq, c.attention_factor,
                                               c.rope_interleave);
      std::vector<double> s(i + 1);
      for (int64_t j = 0; j <= i; ++j) {
        at::Tensor k_nope = kvb[j].narrow(0, h * (Dn + Dv), Dn);
        s[j] = (at::dot(q_nope, k_nope).item<double>() + at::dot(q_rope, k_rope[j]).item<double>()) * c.softmax_scale;
      }
      double mx = *std::max_element(s.begin(), s.end()), z = 0;
      for (double& v : s) z += v = std::exp(v - mx);
      at::Tensor o = at::zeros({Dv}, at::kDouble);
      for (int64_t j = 0; j <= i; ++j) o += s[j] / z * kvb[j].narrow(0, h * (Dn + Dv) + Dn, Dv);
      heads[i].narrow(0, h * Dv, Dv).copy_(o);
    }
  at::Tensor out = at::empty({S, c.hidden}, at::kDouble);
  for (int64_t i = 0; i < S; ++i) out[i].copy_(linear(Wo, bo, heads[i]));
  return out;
}

// MoE block of one token x [H] (already post-attention-normed) -> [H].
inline at::Tensor deepseek_v3_moe_ref(const DeepseekV3RefConfig& c, const DeepseekV3Weights& w, int64_t layer,
                                      const at::Tensor& x_in, const DeepseekV3RefOptions& opt = {}) {
  using namespace deepseek_v3_ref_detail;
  const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
  at::Tensor x = x_in.detach().to(at::kDouble);
  auto routes = deepseek_v3_route_ref(get(w, p + "gate.weight"), get_opt(w, p + "gate.e_score_correction_bias"), x,
                                      c.top_k, c.n_group, c.topk_group, c.norm_topk_prob, c.routed_scaling_factor,
                                      opt.masked_choice_score);
  at::Tensor out = at::zeros({c.hidden}, at::kDouble);
  for (const auto& [e, wt] : routes) {
    const std::string q = p + "experts." + std::to_string(e) + ".";
    out += wt * dense_mlp_ref(get(w, q + "gate_proj.weight"), get(w, q + "up_proj.weight"),
                              get(w, q + "down_proj.weight"), x);
  }
  if (c.n_shared > 0)
    out += dense_mlp_ref(get(w, p + "shared_experts.gate_proj.weight"), get(w, p + "shared_experts.up_proj.weight"),
                         get(w, p + "shared_experts.down_proj.weight"), x);
  return out;
}

// Logits [B,S,V] float64 for input_ids [B,S] int64; each row is one sequence at positions 0..S-1.
// config: the content of a Hugging Face deepseek_v3 config.json. weights: Hub key -> tensor
// (float64), the names of the released checkpoints / transformers save_pretrained, with
// routed experts per expert: model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight.
inline at::Tensor deepseek_v3_reference_logits(const nlohmann::json& config, const DeepseekV3Weights& weights,
                                               const at::Tensor& input_ids, const DeepseekV3RefOptions& opt = {}) {
  using namespace deepseek_v3_ref_detail;
  const DeepseekV3RefConfig c = deepseek_v3_ref_config(config);
  at::Tensor ids = input_ids.to(at::kLong).contiguous();
  const int64_t B = ids.size(0), S = ids.size(1);
  at::Tensor embed = get(weights, "model.embed_tokens.weight");
  at::Tensor head = c.tie_embeddings ? embed : get(weights, "lm_head.weight");
  at::Tensor final_norm = get(weights, "model.norm.weight");
  at::Tensor logits = at::empty({B, S, c.vocab}, at::kDouble);
  for (int64_t b = 0; b < B; ++b) {
    at::Tensor h = at::empty({S, c.hidden}, at::kDouble);
    for (int64_t t = 0; t < S; ++t) {
      int64_t id = ids[b][t].item<int64_t>();
      if (id < 0 || id >= c.vocab) throw std::runtime_error("deepseek_v3 reference: token id out of range");
      h[t].copy_(embed[id]);
    }
    for (int64_t l = 0; l < c.layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      at::Tensor in_norm = get(weights, p + "input_layernorm.weight");
      at::Tensor post_norm = get(weights, p + "post_attention_layernorm.weight");
      at::Tensor xn = at::empty_like(h);
      for (int64_t t = 0; t < S; ++t) xn[t].copy_(rms_norm_ref(h[t], in_norm, c.rms_eps));
      h = h + deepseek_v3_attention_ref(c, weights, l, xn);
      const bool moe = l >= c.first_k_dense;
      at::Tensor Wg, Wu, Wd;
      if (!moe) {
        Wg = get(weights, p + "mlp.gate_proj.weight");
        Wu = get(weights, p + "mlp.up_proj.weight");
        Wd = get(weights, p + "mlp.down_proj.weight");
      }
      for (int64_t t = 0; t < S; ++t) {
        at::Tensor y = rms_norm_ref(h[t], post_norm, c.rms_eps);
        h[t].add_(moe ? deepseek_v3_moe_ref(c, weights, l, y, opt) : dense_mlp_ref(Wg, Wu, Wd, y));
      }
    }
    for (int64_t t = 0; t < S; ++t) logits[b][t].copy_(at::mv(head, rms_norm_ref(h[t], final_norm, c.rms_eps)));
  }
  return logits;
}

}  // namespace glint::testing
