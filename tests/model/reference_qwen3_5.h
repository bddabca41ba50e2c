// Independent float64 reference of the Qwen3.5-MoE text model (model_type qwen3_5_moe, text
// config qwen3_5_moe_text) and of Qwen3-Next (qwen3_next), written as naive loops over
// tokens, heads and experts from the Hugging Face transformers definitions. It shares no
// code with src/ and is meant only for tiny configurations.
//
// Legend: S positions, H hidden, V vocab, Nh / Nkv attention query / kv heads, D head_dim,
// R rotary dims, Hk / Hv DeltaNet key / value heads (r = Hv / Hk), Dk / Dv their dims,
// E experts, I expert width.
//
// Sources read (huggingface/transformers, path @ commit as reported by the index):
//   src/transformers/models/qwen3_5_moe/modeling_qwen3_5_moe.py      @ 5fd974ea3af798c79b3b70d2fd9e52fb58869894
//   src/transformers/models/qwen3_5_moe/modular_qwen3_5_moe.py       @ e36255cb9af68ea2c16fefd6b1c798882cafda16
//   src/transformers/models/qwen3_5_moe/configuration_qwen3_5_moe.py @ e36255cb9af68ea2c16fefd6b1c798882cafda16
//     and the later @strict dataclass form of the same file (same defaults; layer_types run
//     through remap_legacy_layer_types)
//   src/transformers/models/qwen3_next/modeling_qwen3_next.py        @ 01cdc6081c7500f9e50c98b1b943c90ecb665db3
//   src/transformers/models/qwen3_next/configuration_qwen3_next.py   @ 249ef8164cfbd8e288c2f6d8395539b9e90e8300
//     (top-level rope_theta / partial_rotary_factor) and its later dataclass form
//   configuration_utils.remap_legacy_layer_types, PreTrainedConfig.convert_rope_params_to_dict
//
// Facts this file relies on (each easy to get wrong):
//  * Layer kinds: config.layer_types ("linear_attention" | "full_attention"; legacy "mamba" and
//    "attention" are remapped). When absent: layer i is full_attention iff
//    (i + 1) % full_attention_interval == 0 (default interval 4), so the LAST of every group.
//  * Every RMSNorm except the DeltaNet output norm is x * rsqrt(mean x^2 + eps) * (1 + w)
//    (weights stored zero-centred): input/post-attention layernorms, the final norm, q_norm and
//    k_norm (per head, over D). All use rms_norm_eps.
//  * The DeltaNet output norm is x * rsqrt(mean x^2 + eps) * w (w stored around 1, eps =
//    rms_norm_eps), per value head over Dv, then multiplied by silu(z).
//  * Gated attention: q_proj has Nh * 2D rows laid out per head as [q (D) | gate (D)]; the
//    attention output of head h is multiplied elementwise by sigmoid(gate_h) before o_proj.
//    q_norm / k_norm come before RoPE. Scale D^-1/2, causal, GQA: query head h reads kv head
//    h / (Nh / Nkv). attention_bias adds biases to q/k/v/o_proj.
//  * Partial RoPE: R = int(D * partial_rotary_factor) leading dims rotate, rotate-half pairs
//    (i, i + R/2) with inv_freq[i] = theta^(-2i/R); dims R..D-1 pass through.
//    partial_rotary_factor and rope_theta are read from rope_scaling, else rope_parameters,
//    else the top level (a dict value wins over the top level; the dict that wins is
//    rope_scaling when both are given); defaults 0.25 (both families) and 10000.
//  * Qwen3.5's interleaved M-RoPE (mrope_section) feeds the same position to its T/H/W
//    sections for text-only input, so it is plain RoPE here; other rope types are refused.
//  * DeltaNet input (Qwen3.5): in_proj_qkv rows [q (Hk*Dk) | k (Hk*Dk) | v (Hv*Dv)], heads
//    contiguous; in_proj_z [Hv*Dv], in_proj_b / in_proj_a [Hv].
//    Qwen3-Next: in_proj_qkvz viewed as [Hk, 2Dk + 2rDv] = per key head [q | k | v (r heads) |
//    z (r heads)], in_proj_ba as [Hk, 2r] = per key head [b (r) | a (r)]; value head j*r + i
//    sits at slot i of key head j. The conv input is cat(q, k, v) flattened, the same channel
//    order as Qwen3.5's in_proj_qkv, so conv1d.weight means the same in both families.
//  * conv1d: depthwise, no bias, kernel W = linear_conv_kernel_dim, causal:
//    u[t,c] = sum_j w[c,0,j] x[t-(W-1)+j, c] (tap W-1 is the current token), then SiLU.
//  * q, k L2-normalised per key head as x * rsqrt(sum x^2 + 1e-6) (eps inside the root, added
//    to the SUM of squares), then q scaled by Dk^-1/2.
//  * beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias), softplus with threshold 20.
//  * Key head j serves value heads j*r .. j*r + r-1 (repeat_interleave, not tiling).
//  * Recurrence per value head, state St [Dk,Dv] from 0 at position 0:
//    St <- e^g St; delta = beta (v - St^T k); St <- St + k delta^T; o = St^T q.
//  * MoE: router logits h . gate.weight^T, softmax over all E (float32 in transformers), top-k;
//    Qwen3.5-MoE ALWAYS divides the k weights by their sum (its router has no norm_topk_prob);
//    Qwen3-Next divides only when norm_topk_prob (default true). Expert: gate_up rows [0, I)
//    are gate, [I, 2I) up; y = down (silu(gate x) * up x). The shared expert (width
//    shared_expert_intermediate_size) is always added, times sigmoid(shared_expert_gate . h).
//  * Qwen3.5-MoE: every layer is MoE. Qwen3-Next: layer l is MoE iff l is not in
//    mlp_only_layers, num_experts > 0 and (l + 1) % decoder_sparse_step == 0; otherwise a dense
//    SwiGLU of width intermediate_size (mlp.{gate,up,down}_proj).
//  * head_dim defaults to 256 (both configs carry it), not hidden / heads.
//  * lm_head is embed_tokens when tie_word_embeddings (read from the json given, default false).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace glint::testing {
namespace qwen3_5_ref {

using Weights = std::map<std::string, at::Tensor>;

enum class Family { kQwen3_5Moe, kQwen3Next };

struct Config {
  Family family = Family::kQwen3_5Moe;
  int64_t hidden = 0, layers = 0, vocab = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  double rope_theta = 10000.0, eps = 1e-6;
  bool attention_bias = false, tied = false;
  int64_t conv_kernel = 0, k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0;
  int64_t experts = 0, top_k = 0, moe_inter = 0, shared_inter = 0, dense_inter = 0;
  bool norm_topk = true;
  std::vector<std::string> layer_types;
  std::vector<bool> moe_layer;
};

[[noreturn]] inline void fail(const std::string& what) { throw std::invalid_argument("qwen3_5 reference: " + what); }

inline const nlohmann::json* field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

template <typename T>
T get_or(const nlohmann::json& j, const char* key, T fallback) {
  const nlohmann::json* f = field(j, key);
  return f ? f->get<T>() : fallback;
}

inline Config parse_config(const nlohmann::json& given, Family family) {
  const bool next = family == Family::kQwen3Next;
  const nlohmann::json& j = given.contains("text_config") ? given["text_config"] : given;
  Config c;
  c.family = family;
  c.hidden = get_or<int64_t>(j, "hidden_size", 2048);
  c.layers = get_or<int64_t>(j, "num_hidden_layers", next ? 48 : 40);
  c.vocab = get_or<int64_t>(j, "vocab_size", next ? 151936 : 248320);
  c.heads = get_or<int64_t>(j, "num_attention_heads", 16);
  c.kv_heads = get_or<int64_t>(j, "num_key_value_heads", 2);
  c.head_dim = get_or<int64_t>(j, "head_dim", 256);
  c.eps = get_or<double>(j, "rms_norm_eps", 1e-6);
  c.attention_bias = get_or<bool>(j, "attention_bias", false);
  c.tied = get_or<bool>(given, "tie_word_embeddings", false);
  if (get_or<std::string>(j, "hidden_act", "silu") != "silu") fail("hidden_act must be silu");
  c.conv_kernel = get_or<int64_t>(j, "linear_conv_kernel_dim", 4);
  c.k_dim = get_or<int64_t>(j, "linear_key_head_dim", 128);
  c.v_dim = get_or<int64_t>(j, "linear_value_head_dim", 128);
  c.k_heads = get_or<int64_t>(j, "linear_num_key_heads", 16);
  c.v_heads = get_or<int64_t>(j, "linear_num_value_heads", 32);
  c.experts = get_or<int64_t>(j, "num_experts", next ? 512 : 256);
  c.top_k = get_or<int64_t>(j, "num_experts_per_tok", next ? 10 : 8);
  c.moe_inter = get_or<int64_t>(j, "moe_intermediate_size", 512);
  c.shared_inter = get_or<int64_t>(j, "shared_expert_intermediate_size", 512);
  c.dense_inter = next ? get_or<int64_t>(j, "intermediate_size", 5632) : 0;
  c.norm_topk = next ? get_or<bool>(j, "norm_topk_prob", true) : true;
  if (c.heads % c.kv_heads != 0 || c.v_heads % c.k_heads != 0) fail("head counts do not divide");

  // RoPE: the winning dict (rope_scaling over rope_parameters), then the top level.
  const nlohmann::json* rope = field(j, "rope_scaling");
  if (!rope) rope = field(j, "rope_parameters");
  auto rope_field = [&](const char* key) {
    const nlohmann::json* f = rope ? field(*rope, key) : nullptr;
    return f ? f : field(j, key);
  };
  c.rope_theta = rope_field("rope_theta") ? rope_field("rope_theta")->get<double>() : 10000.0;
  const double partial =
      rope_field("partial_rotary_factor") ? rope_field("partial_rotary_factor")->get<double>() : 0.25;
  std::string rope_type = "default";
  if (rope && field(*rope, "rope_type"))
    rope_type = (*rope)["rope_type"].get<std::string>();
  else if (rope && field(*rope, "type"))
    rope_type = (*rope)["type"].get<std::string>();
  if (rope_type != "default" && rope_type != "mrope") fail("rope type " + rope_type + " is not supported");
  c.rotary_dim = int64_t(double(c.head_dim) * partial);
  if (c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim) fail("rotary dims must be even and <= head_dim");

  if (const nlohmann::json* types = field(j, "layer_types")) {
    for (const auto& t : *types) {
      std::string name = t.get<std::string>();
      if (name == "mamba") name = "linear_attention";
      if (name == "attention") name = "full_attention";
      if (name != "linear_attention" && name != "full_attention") fail("unknown layer type " + name);
      c.layer_types.push_back(name);
    }
  } else {
    const int64_t interval = get_or<int64_t>(j, "full_attention_interval", 4);
    for (int64_t i = 0; i < c.layers; ++i)
      c.layer_types.push_back((i + 1) % interval ? "linear_attention" : "full_attention");
  }
  if (int64_t(c.layer_types.size()) != c.layers) fail("layer_types has the wrong length");

  std::vector<int64_t> mlp_only =
      next ? get_or<std::vector<int64_t>>(j, "mlp_only_layers", {}) : std::vector<int64_t>{};
  const int64_t sparse_step = next ? get_or<int64_t>(j, "decoder_sparse_step", 1) : 1;
  for (int64_t l = 0; l < c.layers; ++l)
    c.moe_layer.push_back(!next || (std::find(mlp_only.begin(), mlp_only.end(), l) == mlp_only.end() && c.experts > 0 &&
                                    (l + 1) % sparse_step == 0));
  return c;
}

// A weight as a float64 CPU tensor, checked against `shape` when one is given.
inline at::Tensor weight(const Weights& w, const std::string& key, const std::vector<int64_t>& shape = {}) {
  auto it = w.find(key);
  if (it == w.end()) fail("missing weight " + key);
  at::Tensor t = it->second.detach().to(at::kCPU, at::kDouble).contiguous();
  if (!shape.empty() && t.sizes() != at::IntArrayRef(shape)) {
    std::ostringstream os;
    os << "weight " << key << " is " << t.sizes() << ", expected " << at::IntArrayRef(shape);
    fail(os.str());
  }
  return t;
}

inline double silu(double x) { return x / (1.0 + std::exp(-x)); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// torch.nn.functional.softplus with its defaults (beta 1, threshold 20).
inline double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

inline at::Tensor silu_each(const at::Tensor& x) {  // 1-D
  at::Tensor out = x.clone();
  auto a = out.accessor<double, 1>();
  for (int64_t i = 0; i < out.size(0); ++i) a[i] = silu(a[i]);
  return out;
}

inline double mean_square(const at::Tensor& x) { return (x * x).mean().item<double>(); }

// x [n] -> x / sqrt(mean x^2 + eps) * (1 + w)
inline at::Tensor rms_norm_1p(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x / std::sqrt(mean_square(x) + eps) * (1.0 + w);
}
// x [n] -> x / sqrt(mean x^2 + eps) * w
inline at::Tensor rms_norm_plain(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x / std::sqrt(mean_square(x) + eps) * w;
}
// x [n] -> x / sqrt(sum x^2 + 1e-6)
inline at::Tensor l2_normalize(const at::Tensor& x) { return x / std::sqrt((x * x).sum().item<double>() + 1e-6); }

// Rotate-half RoPE on the first R dims of one head vector x [D] at position `pos`.
inline at::Tensor rope_leading_dims(const at::Tensor& x, int64_t pos, int64_t R, double theta) {
  at::Tensor out = x.clone();
  auto in = x.accessor<double, 1>();
  auto o = out.accessor<double, 1>();
  const int64_t half = R / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = double(pos) * std::pow(theta, -2.0 * double(i) / double(R));
    const double a = in[i], b = in[i + half];
    o[i] = a * std::cos(angle) - b * std::sin(angle);
    o[i + half] = b * std::cos(angle) + a * std::sin(angle);
  }
  return out;
}

// (expert, weight) pairs of one token from its router logits [E]: softmax over all E, the
// top_k largest (ties to the lower index), divided by their sum when `renormalise`.
inline std::vector<std::pair<int64_t, double>> route(const at::Tensor& logits, int64_t top_k, bool renormalise) {
  const int64_t E = logits.size(0);
  auto l = logits.accessor<double, 1>();
  double mx = -INFINITY;
  for (int64_t e = 0; e < E; ++e) mx = std::max(mx, l[e]);
  std::vector<double> p(E);
  double z = 0;
  for (int64_t e = 0; e < E; ++e) z += p[e] = std::exp(l[e] - mx);
  for (double& v : p) v /= z;
  std::vector<int64_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  double kept = 0;
  for (int64_t i = 0; i < top_k; ++i) kept += p[order[i]];
  std::vector<std::pair<int64_t, double>> out;
  for (int64_t i = 0; i < top_k; ++i) out.emplace_back(order[i], renormalise ? p[order[i]] / kept : p[order[i]]);
  return out;
}

inline std::string layer_prefix(int64_t l) { return "layers." + std::to_string(l) + "."; }

// Gated full attention over one sequence: x [S,H] (already normed) -> [S,H]. p ends in "self_attn.".
inline at::Tensor gated_attention(const Config& c, const Weights& w, const std::string& p, const at::Tensor& x) {
  const int64_t S = x.size(0), H = c.hidden, D = c.head_dim, Nh = c.heads, Nkv = c.kv_heads;
  at::Tensor Wq = weight(w, p + "q_proj.weight", {Nh * 2 * D, H}), Wk = weight(w, p + "k_proj.weight", {Nkv * D, H});
  at::Tensor Wv = weight(w, p + "v_proj.weight", {Nkv * D, H}), Wo = weight(w, p + "o_proj.weight", {H, Nh * D});
  at::Tensor qn = weight(w, p + "q_norm.weight", {D}), kn = weight(w, p + "k_norm.weight", {D});
  at::Tensor bq, bk, bv, bo;
  if (c.attention_bias) {
    bq = weight(w, p + "q_proj.bias", {Nh * 2 * D}), bk = weight(w, p + "k_proj.bias", {Nkv * D});
    bv = weight(w, p + "v_proj.bias", {Nkv * D}), bo = weight(w, p + "o_proj.bias", {H});
  }
  auto project = [](const at::Tensor& W, const at::Tensor& b, const at::Tensor& v) {
    at::Tensor y = at::mv(W, v);
    return b.defined() ? y + b : y;
  };
  std::vector<std::vector<at::Tensor>> q(S), gate(S), k(S), v(S);
  for (int64_t t = 0; t < S; ++t) {
    at::Tensor pq = project(Wq, bq, x[t]), pk = project(Wk, bk, x[t]), pv = project(Wv, bv, x[t]);
    for (int64_t h = 0; h < Nh; ++h) {
      q[t].push_back(
          rope_leading_dims(rms_norm_1p(pq.narrow(0, h * 2 * D, D), qn, c.eps), t, c.rotary_dim, c.rope_theta));
      gate[t].push_back(pq.narrow(0, h * 2 * D + D, D));
    }
    for (int64_t j = 0; j < Nkv; ++j) {
      k[t].push_back(rope_leading_dims(rms_norm_1p(pk.narrow(0, j * D, D), kn, c.eps), t, c.rotary_dim, c.rope_theta));
      v[t].push_back(pv.narrow(0, j * D, D));
    }
  }
  at::Tensor out = at::zeros({S, H}, at::kDouble);
  for (int64_t t = 0; t < S; ++t) {
    std::vector<at::Tensor> heads;
    for (int64_t h = 0; h < Nh; ++h) {
      const int64_t j = h / (Nh / Nkv);
      std::vector<double> score(t + 1);
      double mx = -INFINITY, z = 0;
      for (int64_t s = 0; s <= t; ++s) {
        score[s] = at::dot(q[t][h], k[s][j]).item<double>() / std::sqrt(double(D));
        mx = std::max(mx, score[s]);
      }
      for (double& sc : score) z += sc = std::exp(sc - mx);
      at::Tensor o = at::zeros({D}, at::kDouble);
      for (int64_t s = 0; s <= t; ++s) o = o + score[s] / z * v[s][j];
      heads.push_back(o * at::sigmoid(gate[t][h]));
    }
    out[t] = project(Wo, bo, at::cat(heads, 0));
  }
  return out;
}

// Per-token DeltaNet inputs before the conv: qkv [S, 2HkDk + HvDv] (conv channel order),
// z [S, HvDv], b and a [S, Hv].
struct DeltaNetInputs {
  at::Tensor qkv, z, b, a;
};

inline DeltaNetInputs project_qwen3_5(const Config& c, const Weights& w, const std::string& p, const at::Tensor& x) {
  const int64_t H = c.hidden, key = c.k_heads * c.k_dim, value = c.v_heads * c.v_dim;
  DeltaNetInputs in;
  in.qkv = at::matmul(x, weight(w, p + "in_proj_qkv.weight", {2 * key + value, H}).t());
  in.z = at::matmul(x, weight(w, p + "in_proj_z.weight", {value, H}).t());
  in.b = at::matmul(x, weight(w, p + "in_proj_b.weight", {c.v_heads, H}).t());
  in.a = at::matmul(x, weight(w, p + "in_proj_a.weight", {c.v_heads, H}).t());
  return in;
}

inline DeltaNetInputs project_qwen3_next(const Config& c, const Weights& w, const std::string& p, const at::Tensor& x) {
  const int64_t S = x.size(0), H = c.hidden, Hk = c.k_heads, Dk = c.k_dim, Dv = c.v_dim, r = c.v_heads / c.k_heads;
  const int64_t per_head = 2 * Dk + 2 * r * Dv;
  at::Tensor qkvz = at::matmul(x, weight(w, p + "in_proj_qkvz.weight", {Hk * per_head, H}).t()).view({S, Hk, per_head});
  at::Tensor ba = at::matmul(x, weight(w, p + "in_proj_ba.weight", {Hk * 2 * r, H}).t()).view({S, Hk, 2 * r});
  DeltaNetInputs in;
  in.qkv = at::cat({qkvz.narrow(2, 0, Dk).reshape({S, -1}), qkvz.narrow(2, Dk, Dk).reshape({S, -1}),
                    qkvz.narrow(2, 2 * Dk, r * Dv).reshape({S, -1})},
                   1);
  in.z = qkvz.narrow(2, 2 * Dk + r * Dv, r * Dv).reshape({S, -1});
  in.b = ba.narrow(2, 0, r).reshape({S, -1});
  in.a = ba.narrow(2, r, r).reshape({S, -1});
  return in;
}

// Gated DeltaNet over one sequence from its projected inputs -> [S,H]. p ends in "linear_attn.".
inline at::Tensor gated_deltanet(const Config& c, const Weights& w, const std::string& p, const DeltaNetInputs& in) {
  const int64_t S = in.qkv.size(0), H = c.hidden, Hk = c.k_heads, Hv = c.v_heads, Dk = c.k_dim, Dv = c.v_dim;
  const int64_t key = Hk * Dk, value = Hv * Dv, channels = 2 * key + value, W = c.conv_kernel;
  at::Tensor conv = weight(w, p + "conv1d.weight", {channels, 1, W});
  at::Tensor A_log = weight(w, p + "A_log", {Hv}), dt_bias = weight(w, p + "dt_bias", {Hv});
  at::Tensor norm = weight(w, p + "norm.weight", {Dv}), out_proj = weight(w, p + "out_proj.weight", {H, value});

  std::vector<at::Tensor> state(Hv, at::zeros({Dk, Dv}, at::kDouble));
  at::Tensor out = at::zeros({S, H}, at::kDouble);
  for (int64_t t = 0; t < S; ++t) {
    at::Tensor u = at::zeros({channels}, at::kDouble);
    for (int64_t j = 0; j < W; ++j) {
      const int64_t src = t - (W - 1) + j;
      if (src >= 0) u = u + conv.select(2, j).select(1, 0) * in.qkv[src];
    }
    u = silu_each(u);
    std::vector<at::Tensor> q, k;
    for (int64_t j = 0; j < Hk; ++j) {
      q.push_back(l2_normalize(u.narrow(0, j * Dk, Dk)) / std::sqrt(double(Dk)));
      k.push_back(l2_normalize(u.narrow(0, key + j * Dk, Dk)));
    }
    std::vector<at::Tensor> heads;
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t j = h / (Hv / Hk);
      const double beta = sigmoid(in.b[t][h].item<double>());
      const double g =
          -std::exp(A_log[h].item<double>()) * softplus(in.a[t][h].item<double>() + dt_bias[h].item<double>());
      at::Tensor v = u.narrow(0, 2 * key + h * Dv, Dv);
      state[h] = std::exp(g) * state[h];
      at::Tensor delta = beta * (v - at::mv(state[h].t(), k[j]));
      state[h] = state[h] + at::outer(k[j], delta);
      at::Tensor o = at::mv(state[h].t(), q[j]);
      heads.push_back(rms_norm_plain(o, norm, c.eps) * silu_each(in.z[t].narrow(0, h * Dv, Dv)));
    }
    out[t] = at::mv(out_proj, at::cat(heads, 0));
  }
  return out;
}

// SwiGLU: down (silu(gate x) * up x)
inline at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down, const at::Tensor& x) {
  return at::mv(down, silu_each(at::mv(gate, x)) * at::mv(up, x));
}

// Routed experts plus the gated shared expert, per token: x [S,H] -> [S,H]. p ends in "mlp.".
inline at::Tensor sparse_moe(const Config& c, const Weights& w, const std::string& p, const at::Tensor& x) {
  const int64_t S = x.size(0), H = c.hidden, E = c.experts, I = c.moe_inter, Is = c.shared_inter;
  at::Tensor router = weight(w, p + "gate.weight", {E, H});
  std::vector<at::Tensor> gate(E), up(E), down(E);  // [I,H], [I,H], [H,I]
  if (c.family == Family::kQwen3_5Moe) {
    at::Tensor gate_up = weight(w, p + "experts.gate_up_proj", {E, 2 * I, H});
    at::Tensor down_all = weight(w, p + "experts.down_proj", {E, H, I});
    for (int64_t e = 0; e < E; ++e) {
      gate[e] = gate_up[e].narrow(0, 0, I);
      up[e] = gate_up[e].narrow(0, I, I);
      down[e] = down_all[e];
    }
  } else {
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = p + "experts." + std::to_string(e) + ".";
      gate[e] = weight(w, ep + "gate_proj.weight", {I, H});
      up[e] = weight(w, ep + "up_proj.weight", {I, H});
      down[e] = weight(w, ep + "down_proj.weight", {H, I});
    }
  }
  at::Tensor sg = weight(w, p + "shared_expert.gate_proj.weight", {Is, H});
  at::Tensor su = weight(w, p + "shared_expert.up_proj.weight", {Is, H});
  at::Tensor sd = weight(w, p + "shared_expert.down_proj.weight", {H, Is});
  at::Tensor shared_gate = weight(w, p + "shared_expert_gate.weight", {1, H});
  at::Tensor out = at::zeros({S, H}, at::kDouble);
  for (int64_t t = 0; t < S; ++t) {
    at::Tensor y = at::zeros({H}, at::kDouble);
    for (const auto& [e, weight_e] : route(at::mv(router, x[t]), c.top_k, c.norm_topk))
      y = y + weight_e * swiglu(gate[e], up[e], down[e], x[t]);
    y = y + sigmoid(at::dot(shared_gate[0], x[t]).item<double>()) * swiglu(sg, su, sd, x[t]);
    out[t] = y;
  }
  return out;
}

// Qwen3-Next's dense layers: x [S,H] -> [S,H]. p ends in "mlp.".
inline at::Tensor dense_mlp(const Config& c, const Weights& w, const std::string& p, const at::Tensor& x) {
  const int64_t H = c.hidden, F = c.dense_inter;
  at::Tensor gate = weight(w, p + "gate_proj.weight", {F, H}), up = weight(w, p + "up_proj.weight", {F, H});
  at::Tensor down = weight(w, p + "down_proj.weight", {H, F});
  at::Tensor out = at::zeros_like(x);
  for (int64_t t = 0; t < x.size(0); ++t) out[t] = swiglu(gate, up, down, x[t]);
  return out;
}

inline at::Tensor norm_rows(const at::Tensor& x, const at::Tensor& w, double eps) {  // [S,H]
  at::Tensor out = at::zeros_like(x);
  for (int64_t t = 0; t < x.size(0); ++t) out[t] = rms_norm_1p(x[t], w, eps);
  return out;
}

// input_ids [B,S] -> logits [B,S,V] float64; each row one sequence at positions 0..S-1.
inline at::Tensor logits(const Config& c, const Weights& w, const at::Tensor& input_ids) {
  const int64_t H = c.hidden, V = c.vocab;
  at::Tensor ids = input_ids.to(at::kCPU, at::kLong).contiguous();
  const int64_t B = ids.size(0), S = ids.size(1);
  at::Tensor embed = weight(w, "embed_tokens.weight", {V, H});
  at::Tensor final_norm = weight(w, "norm.weight", {H});
  at::Tensor head = c.tied ? embed : weight(w, "lm_head.weight", {V, H});
  at::Tensor out = at::zeros({B, S, V}, at::kDouble);
  for (int64_t b = 0; b < B; ++b) {
    at::Tensor h = at::zeros({S, H}, at::kDouble);
    for (int64_t t = 0; t < S; ++t) {
      const int64_t id = ids[b][t].item<int64_t>();
      if (id < 0 || id >= V) fail("token id " + std::to_string(id) + " outside the vocabulary");
      h[t] = embed[id];
    }
    for (int64_t l = 0; l < c.layers; ++l) {
      const std::string p = layer_prefix(l);
      at::Tensor x = norm_rows(h, weight(w, p + "input_layernorm.weight", {H}), c.eps);
      if (c.layer_types[l] == "full_attention") {
        h = h + gated_attention(c, w, p + "self_attn.", x);
      } else {
        const std::string lp = p + "linear_attn.";
        DeltaNetInputs in =
            c.family == Family::kQwen3_5Moe ? project_qwen3_5(c, w, lp, x) : project_qwen3_next(c, w, lp, x);
        h = h + gated_deltanet(c, w, lp, in);
      }
      x = norm_rows(h, weight(w, p + "post_attention_layernorm.weight", {H}), c.eps);
      h = h + (c.moe_layer[l] ? sparse_moe(c, w, p + "mlp.", x) : dense_mlp(c, w, p + "mlp.", x));
    }
    for (int64_t t = 0; t < S; ++t) out[b][t] = at::mv(head, rms_norm_1p(h[t], final_norm, c.eps));
  }
  return out;
}

}  // namespace qwen3_5_ref

// Logits [B,S,V] float64 of the Qwen3.5-MoE text model; each row one sequence at positions
// 0..S-1. text_config: the "text_config" object of a qwen3_5_moe config (or the whole config,
// which is then descended into) or a qwen3_5_moe_text config. weights: keys without the
// model prefix ("embed_tokens.weight", "layers.0.linear_attn.in_proj_qkv.weight", ...,
// "norm.weight") plus "lm_head.weight" unless tied; experts packed:
// "layers.L.mlp.experts.gate_up_proj" [E,2I,H] and "layers.L.mlp.experts.down_proj" [E,H,I].
// Throws std::invalid_argument naming a missing or misshapen weight.
inline at::Tensor qwen3_5_moe_reference_logits(const nlohmann::json& text_config,
                                               const std::map<std::string, at::Tensor>& weights,
                                               const at::Tensor& input_ids) {
  using namespace qwen3_5_ref;
  return logits(parse_config(text_config, Family::kQwen3_5Moe), weights, input_ids);
}

// The same for Qwen3-Next (model_type qwen3_next) in its on-disk layout: fused
// linear_attn.in_proj_qkvz / in_proj_ba, per-expert "layers.L.mlp.experts.E.{gate,up,down}_proj.weight",
// norm_topk_prob, dense layers from mlp_only_layers / decoder_sparse_step.
inline at::Tensor qwen3_next_reference_logits(const nlohmann::json& config,
                                              const std::map<std::string, at::Tensor>& weights,
                                              const at::Tensor& input_ids) {
  using namespace qwen3_5_ref;
  return logits(parse_config(config, Family::kQwen3Next), weights, input_ids);
}

}  // namespace glint::testing
