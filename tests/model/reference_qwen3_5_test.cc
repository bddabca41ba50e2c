// Sanity checks of the float64 Qwen3.5-MoE / Qwen3-Next reference (reference_qwen3_5.h):
// causality, the two families agreeing where their settings agree, and pieces against values
// worked out by hand from the transformers definitions.
//
// Legend: S positions, H hidden, V vocab, E experts, I expert width, Hk / Hv DeltaNet key /
// value heads, Dk / Dv their dims.
#include "reference_qwen3_5.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace glint {
namespace {

using namespace glint::testing;
using qwen3_5_ref::Weights;
using json = nlohmann::json;

const auto kF64Options = at::TensorOptions().dtype(at::kDouble);

// Four layers (three DeltaNet, then full attention), r = Hv / Hk = 2, partial RoPE over
// half of each head, written in the v5 spelling (rope_parameters with M-RoPE sections).
json tiny_text_config() {
  return json{{"model_type", "qwen3_5_moe_text"},
              {"vocab_size", 23},
              {"hidden_size", 16},
              {"num_hidden_layers", 4},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 8},
              {"rms_norm_eps", 1e-6},
              {"rope_parameters",
               {{"rope_type", "default"},
                {"rope_theta", 100.0},
                {"partial_rotary_factor", 0.5},
                {"mrope_interleaved", true},
                {"mrope_section", {1, 1, 0}}}},
              {"layer_types", {"linear_attention", "linear_attention", "linear_attention", "full_attention"}},
              {"linear_conv_kernel_dim", 3},
              {"linear_key_head_dim", 4},
              {"linear_value_head_dim", 3},
              {"linear_num_key_heads", 2},
              {"linear_num_value_heads", 4},
              {"num_experts", 4},
              {"num_experts_per_tok", 2},
              {"moe_intermediate_size", 5},
              {"shared_expert_intermediate_size", 6},
              {"tie_word_embeddings", false}};
}

// Random weights for a Qwen3.5-MoE config in its key layout (packed experts).
Weights random_qwen3_5_weights(const json& j) {
  const int64_t H = j["hidden_size"], V = j["vocab_size"], L = j["num_hidden_layers"];
  const int64_t Nh = j["num_attention_heads"], Nkv = j["num_key_value_heads"], D = j["head_dim"];
  const int64_t Hk = j["linear_num_key_heads"], Hv = j["linear_num_value_heads"];
  const int64_t Dk = j["linear_key_head_dim"], Dv = j["linear_value_head_dim"], W = j["linear_conv_kernel_dim"];
  const int64_t E = j["num_experts"], I = j["moe_intermediate_size"], Is = j["shared_expert_intermediate_size"];
  auto mat = [](int64_t out, int64_t in) { return at::randn({out, in}, kF64Options) / std::sqrt(double(in)); };
  auto small = [](std::vector<int64_t> shape) { return 0.2 * at::randn(shape, kF64Options); };
  Weights w;
  w["embed_tokens.weight"] = at::randn({V, H}, kF64Options);
  w["lm_head.weight"] = mat(V, H);
  w["norm.weight"] = small({H});
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    w[p + "input_layernorm.weight"] = small({H});
    w[p + "post_attention_layernorm.weight"] = small({H});
    if (j["layer_types"][l] == "full_attention") {
      const std::string a = p + "self_attn.";
      w[a + "q_proj.weight"] = mat(Nh * 2 * D, H);
      w[a + "k_proj.weight"] = mat(Nkv * D, H);
      w[a + "v_proj.weight"] = mat(Nkv * D, H);
      w[a + "o_proj.weight"] = mat(H, Nh * D);
      w[a + "q_norm.weight"] = small({D});
      w[a + "k_norm.weight"] = small({D});
    } else {
      const std::string a = p + "linear_attn.";
      w[a + "in_proj_qkv.weight"] = mat(2 * Hk * Dk + Hv * Dv, H);
      w[a + "in_proj_z.weight"] = mat(Hv * Dv, H);
      w[a + "in_proj_b.weight"] = mat(Hv, H);
      w[a + "in_proj_a.weight"] = mat(Hv, H);
      w[a + "conv1d.weight"] = 0.5 * at::randn({2 * Hk * Dk + Hv * Dv, 1, W}, kF64Options);
      w[a + "A_log"] = at::log(at::rand({Hv}, kF64Options) * 3 + 0.5);
      w[a + "dt_bias"] = 0.5 * at::randn({Hv}, kF64Options);
      w[a + "norm.weight"] = 1.0 + small({Dv});
      w[a + "out_proj.weight"] = mat(H, Hv * Dv);
    }
    const std::string m = p + "mlp.";
    w[m + "gate.weight"] = mat(E, H);
    w[m + "experts.gate_up_proj"] = at::randn({E, 2 * I, H}, kF64Options) / std::sqrt(double(H));
    w[m + "experts.down_proj"] = at::randn({E, H, I}, kF64Options) / std::sqrt(double(I));
    w[m + "shared_expert.gate_proj.weight"] = mat(Is, H);
    w[m + "shared_expert.up_proj.weight"] = mat(Is, H);
    w[m + "shared_expert.down_proj.weight"] = mat(H, Is);
    w[m + "shared_expert_gate.weight"] = mat(1, H);
  }
  return w;
}

// The same model in Qwen3-Next's on-disk layout: in_proj_qkvz / in_proj_ba fused per key
// head, experts one by one.
Weights to_qwen3_next(const Weights& w, const json& j) {
  const int64_t L = j["num_hidden_layers"], Hk = j["linear_num_key_heads"], Hv = j["linear_num_value_heads"];
  const int64_t Dk = j["linear_key_head_dim"], Dv = j["linear_value_head_dim"], E = j["num_experts"];
  const int64_t I = j["moe_intermediate_size"], r = Hv / Hk, key = Hk * Dk;
  Weights out = w;
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::string a = p + "linear_attn.";
    if (w.count(a + "in_proj_qkv.weight")) {
      const at::Tensor &qkv = w.at(a + "in_proj_qkv.weight"), &z = w.at(a + "in_proj_z.weight");
      const at::Tensor &b = w.at(a + "in_proj_b.weight"), &av = w.at(a + "in_proj_a.weight");
      std::vector<at::Tensor> qkvz_rows, ba_rows;
      for (int64_t h = 0; h < Hk; ++h) {
        qkvz_rows.push_back(qkv.narrow(0, h * Dk, Dk));                    // q of key head h
        qkvz_rows.push_back(qkv.narrow(0, key + h * Dk, Dk));              // k
        qkvz_rows.push_back(qkv.narrow(0, 2 * key + h * r * Dv, r * Dv));  // v of value heads hr..hr+r-1
        qkvz_rows.push_back(z.narrow(0, h * r * Dv, r * Dv));              // z of the same heads
        ba_rows.push_back(b.narrow(0, h * r, r));
        ba_rows.push_back(av.narrow(0, h * r, r));
      }
      for (const char* k : {"in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight"})
        out.erase(a + k);
      out[a + "in_proj_qkvz.weight"] = at::cat(qkvz_rows, 0);
      out[a + "in_proj_ba.weight"] = at::cat(ba_rows, 0);
    }
    const std::string m = p + "mlp.experts.";
    const at::Tensor &gate_up = w.at(m + "gate_up_proj"), &down = w.at(m + "down_proj");
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = m + std::to_string(e) + ".";
      out[ep + "gate_proj.weight"] = gate_up[e].narrow(0, 0, I).clone();
      out[ep + "up_proj.weight"] = gate_up[e].narrow(0, I, I).clone();
      out[ep + "down_proj.weight"] = down[e].clone();
    }
    out.erase(m + "gate_up_proj");
    out.erase(m + "down_proj");
  }
  return out;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST(Qwen35Reference, LaterTokensNeverChangeEarlierLogits) {
  at::manual_seed(11);
  json c = tiny_text_config();
  Weights w = random_qwen3_5_weights(c);
  at::Tensor ids = at::tensor({3, 17, 5, 5, 9, 0, 22}, at::kLong).view({1, 7});
  at::Tensor changed = ids.clone();
  changed[0][4] = 12;
  at::Tensor a = qwen3_5_moe_reference_logits(c, w, ids), b = qwen3_5_moe_reference_logits(c, w, changed);
  ASSERT_EQ(a.sizes(), (std::vector<int64_t>{1, 7, 23}));
  EXPECT_LT(max_diff(a[0].narrow(0, 0, 4), b[0].narrow(0, 0, 4)), 1e-12);
  for (int64_t t = 4; t < 7; ++t) EXPECT_GT(max_diff(a[0][t], b[0][t]), 1e-6) << t;
  // Rows are independent sequences.
  at::Tensor both = qwen3_5_moe_reference_logits(c, w, at::cat({ids, changed}, 0));
  EXPECT_LT(max_diff(both[0], a[0]), 1e-12);
  EXPECT_LT(max_diff(both[1], b[0]), 1e-12);
}

// Qwen3-Next with Qwen3.5's weights fused into its own layout and the settings that Qwen3.5
// fixes (renormalised top-k, every layer MoE) computes the same logits: the families differ
// in layout, not in math. The Qwen3-Next config uses the legacy top-level RoPE spelling.
TEST(Qwen35Reference, QwenNextWithFusedWeightsMatchesQwen35) {
  at::manual_seed(12);
  json c = tiny_text_config();
  Weights w = random_qwen3_5_weights(c);
  json next = c;
  next["model_type"] = "qwen3_next";
  next.erase("rope_parameters");
  next["rope_theta"] = 100.0;
  next["partial_rotary_factor"] = 0.5;
  next["norm_topk_prob"] = true;
  next["decoder_sparse_step"] = 1;
  next["mlp_only_layers"] = json::array();
  Weights fused = to_qwen3_next(w, c);
  ASSERT_EQ(fused.count("layers.0.linear_attn.in_proj_qkv.weight"), 0u);
  at::Tensor ids = at::tensor({4, 8, 15, 16, 22, 2, 11, 1, 6, 0}, at::kLong).view({2, 5});
  at::Tensor want = qwen3_5_moe_reference_logits(c, w, ids);
  EXPECT_LT(max_diff(qwen3_next_reference_logits(next, fused, ids), want), 1e-12);
  // The flag matters: without renormalisation the routed sum shrinks.
  next["norm_topk_prob"] = false;
  EXPECT_GT(max_diff(qwen3_next_reference_logits(next, fused, ids), want), 1e-6);
  // So does the fused order: swapping two key heads' blocks is another model.
  next["norm_topk_prob"] = true;
  Weights swapped = fused;
  at::Tensor& qkvz = swapped["layers.1.linear_attn.in_proj_qkvz.weight"];
  qkvz = at::cat({qkvz.narrow(0, qkvz.size(0) / 2, qkvz.size(0) / 2), qkvz.narrow(0, 0, qkvz.size(0) / 2)}, 0);
  EXPECT_GT(max_diff(qwen3_next_reference_logits(next, swapped, ids), want), 1e-6);
}

TEST(Qwen35Reference, ConfigDefaultsFollowTransformers) {
  using qwen3_5_ref::Family;
  json c = tiny_text_config();
  c.erase("layer_types");
  // Default interval 4: the last layer of every four is full attention.
  EXPECT_EQ(qwen3_5_ref::parse_config(c, Family::kQwen3_5Moe).layer_types,
            (std::vector<std::string>{"linear_attention", "linear_attention", "linear_attention", "full_attention"}));
  c["full_attention_interval"] = 2;
  EXPECT_EQ(qwen3_5_ref::parse_config(c, Family::kQwen3_5Moe).layer_types,
            (std::vector<std::string>{"linear_attention", "full_attention", "linear_attention", "full_attention"}));
  c["layer_types"] = {"mamba", "attention", "linear_attention", "full_attention"};
  EXPECT_EQ(qwen3_5_ref::parse_config(c, Family::kQwen3_5Moe).layer_types,
            (std::vector<std::string>{"linear_attention", "full_attention", "linear_attention", "full_attention"}));
  // partial_rotary_factor: the rope dict wins over the top level; 0.25 when neither has it.
  c["partial_rotary_factor"] = 1.0;
  EXPECT_EQ(qwen3_5_ref::parse_config(c, Family::kQwen3_5Moe).rotary_dim, 4);
  c["rope_parameters"].erase("partial_rotary_factor");
  EXPECT_EQ(qwen3_5_ref::parse_config(c, Family::kQwen3_5Moe).rotary_dim, 8);
  c.erase("partial_rotary_factor");
  EXPECT_EQ(qwen3_5_ref::parse_config(c, Family::kQwen3_5Moe).rotary_dim, 2);
  // Qwen3-Next: dense layers from mlp_only_layers and decoder_sparse_step.
  c["mlp_only_layers"] = json::array({0});
  c["decoder_sparse_step"] = 2;
  EXPECT_EQ(qwen3_5_ref::parse_config(c, Family::kQwen3Next).moe_layer, (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(qwen3_5_ref::parse_config(c, Family::kQwen3_5Moe).moe_layer, (std::vector<bool>{true, true, true, true}));
  c["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_THROW(qwen3_5_ref::parse_config(c, Family::kQwen3_5Moe), std::invalid_argument);
}

TEST(Qwen35Reference, RopeRotatesTheLeadingDimsByHalves) {
  // D = 8, R = 4, theta = 100, position 1: pairs (0,2) at angle 1, (1,3) at angle 100^-1/2 = 0.1.
  at::Tensor x = at::arange(1, 9, kF64Options);
  at::Tensor y = qwen3_5_ref::rope_leading_dims(x, 1, 4, 100.0);
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.1), s2 = std::sin(0.1);
  std::vector<double> want = {1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2, 5, 6, 7, 8};
  for (int64_t i = 0; i < 8; ++i) EXPECT_NEAR(y[i].item<double>(), want[i], 1e-15) << i;
  EXPECT_LT(max_diff(qwen3_5_ref::rope_leading_dims(x, 0, 4, 100.0), x), 1e-15);
}

TEST(Qwen35Reference, RouterRenormalisesTheTopK) {
  // Softmax of log(1..4) is (.1, .2, .3, .4); the top two are experts 3 and 2.
  at::Tensor logits = at::log(at::arange(1, 5, kF64Options));
  auto kept = qwen3_5_ref::route(logits, 2, /*renormalise=*/true);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].first, 3);
  EXPECT_EQ(kept[1].first, 2);
  EXPECT_NEAR(kept[0].second, 4.0 / 7.0, 1e-15);
  EXPECT_NEAR(kept[1].second, 3.0 / 7.0, 1e-15);
  auto raw = qwen3_5_ref::route(logits, 2, /*renormalise=*/false);
  EXPECT_NEAR(raw[0].second, 0.4, 1e-15);
  EXPECT_NEAR(raw[1].second, 0.3, 1e-15);
}

// The DeltaNet layer on two tokens against the formulas written out per value head, with
// Hk = 2 key heads serving Hv = 4 value heads (head h reads key head h / 2).
TEST(Qwen35Reference, DeltaNetLayerMatchesHandComputedTwoTokens) {
  at::manual_seed(13);
  json j = tiny_text_config();
  qwen3_5_ref::Config c = qwen3_5_ref::parse_config(j, qwen3_5_ref::Family::kQwen3_5Moe);
  Weights w = random_qwen3_5_weights(j);
  const std::string p = "layers.0.linear_attn.";
  const int64_t H = 16, Hk = 2, Hv = 4, Dk = 4, Dv = 3, W = 3, key = Hk * Dk;
  at::Tensor x = at::randn({2, H}, kF64Options);
  at::Tensor got = qwen3_5_ref::gated_deltanet(c, w, p, qwen3_5_ref::project_qwen3_5(c, w, p, x));

  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  at::Tensor qkv = at::matmul(x, w[p + "in_proj_qkv.weight"].t()), z = at::matmul(x, w[p + "in_proj_z.weight"].t());
  at::Tensor b = at::matmul(x, w[p + "in_proj_b.weight"].t()), a = at::matmul(x, w[p + "in_proj_a.weight"].t());
  at::Tensor cw = w[p + "conv1d.weight"];
  // Conv: token 0 sees only tap W-1; token 1 sees tap W-2 on token 0 and W-1 on itself.
  std::vector<std::vector<double>> u(2, std::vector<double>(qkv.size(1)));
  for (int64_t ch = 0; ch < qkv.size(1); ++ch) {
    u[0][ch] = silu(cw[ch][0][W - 1].item<double>() * qkv[0][ch].item<double>());
    u[1][ch] = silu(cw[ch][0][W - 2].item<double>() * qkv[0][ch].item<double>() +
                    cw[ch][0][W - 1].item<double>() * qkv[1][ch].item<double>());
  }
  // q, k of key head kh at token t: x / sqrt(sum x^2 + 1e-6), q also / sqrt(Dk).
  auto head = [&](int64_t t, int64_t offset, double scale) {
    std::vector<double> v(u[t].begin() + offset, u[t].begin() + offset + Dk);
    double ss = 0;
    for (double e : v) ss += e * e;
    for (double& e : v) e = e / std::sqrt(ss + 1e-6) * scale;
    return v;
  };
  auto dot = [](const std::vector<double>& l, const std::vector<double>& r) {
    double s = 0;
    for (size_t i = 0; i < l.size(); ++i) s += l[i] * r[i];
    return s;
  };
  std::vector<double> outputs[2];
  for (int64_t h = 0; h < Hv; ++h) {
    const int64_t kh = h / 2;
    std::vector<double> q0 = head(0, kh * Dk, 1 / std::sqrt(double(Dk))), k0 = head(0, key + kh * Dk, 1.0);
    std::vector<double> q1 = head(1, kh * Dk, 1 / std::sqrt(double(Dk))), k1 = head(1, key + kh * Dk, 1.0);
    std::vector<double> v0(u[0].begin() + 2 * key + h * Dv, u[0].begin() + 2 * key + (h + 1) * Dv);
    std::vector<double> v1(u[1].begin() + 2 * key + h * Dv, u[1].begin() + 2 * key + (h + 1) * Dv);
    const double beta0 = sig(b[0][h].item<double>()), beta1 = sig(b[1][h].item<double>());
    const double pre = a[1][h].item<double>() + w[p + "dt_bias"][h].item<double>();
    const double g1 = -std::exp(w[p + "A_log"][h].item<double>()) * std::log1p(std::exp(pre));
    // State after token 0: k0 (beta0 v0)^T, so o0 = beta0 (k0.q0) v0. After token 1:
    // S = e^g1 S0 + k1 d^T with d = beta1 (v1 - e^g1 beta0 (k0.k1) v0); o1 = S^T q1.
    for (int64_t t = 0; t < 2; ++t) {
      std::vector<double> o(Dv);
      for (int64_t i = 0; i < Dv; ++i) {
        if (t == 0) {
          o[i] = beta0 * dot(k0, q0) * v0[i];
        } else {
          const double d = beta1 * (v1[i] - std::exp(g1) * beta0 * dot(k0, k1) * v0[i]);
          o[i] = std::exp(g1) * beta0 * dot(k0, q1) * v0[i] + dot(k1, q1) * d;
        }
      }
      double ms = 0;
      for (double e : o) ms += e * e / Dv;
      for (int64_t i = 0; i < Dv; ++i)
        outputs[t].push_back(o[i] / std::sqrt(ms + 1e-6) * w[p + "norm.weight"][i].item<double>() *
                             silu(z[t][h * Dv + i].item<double>()));
    }
  }
  for (int64_t t = 0; t < 2; ++t) {
    at::Tensor want = at::mv(w[p + "out_proj.weight"], at::tensor(outputs[t], kF64Options));
    EXPECT_LT(max_diff(got[t], want), 1e-12) << "token " << t;
  }
}

// One token through gated attention: softmax over one key is 1, so the output is o_proj of
// each head's value (kv head h / 2) times sigmoid of that head's gate half of q_proj.
TEST(Qwen35Reference, GatedAttentionOfOneTokenIsItsGatedValue) {
  at::manual_seed(14);
  json j = tiny_text_config();
  qwen3_5_ref::Config c = qwen3_5_ref::parse_config(j, qwen3_5_ref::Family::kQwen3_5Moe);
  Weights w = random_qwen3_5_weights(j);
  const std::string p = "layers.3.self_attn.";
  const int64_t H = 16, Nh = 4, D = 8;
  at::Tensor x = at::randn({1, H}, kF64Options);
  at::Tensor pq = at::mv(w[p + "q_proj.weight"], x[0]), pv = at::mv(w[p + "v_proj.weight"], x[0]);
  std::vector<at::Tensor> heads;
  for (int64_t h = 0; h < Nh; ++h)
    heads.push_back(pv.narrow(0, (h / 2) * D, D) * at::sigmoid(pq.narrow(0, h * 2 * D + D, D)));
  at::Tensor want = at::mv(w[p + "o_proj.weight"], at::cat(heads, 0));
  EXPECT_LT(max_diff(qwen3_5_ref::gated_attention(c, w, p, x)[0], want), 1e-13);
}

// With every block's output projection zero the residual stream stays the embedding, so the
// logits are lm_head . ((1 + w) * e / rms(e)); tied embeddings replace lm_head.
TEST(Qwen35Reference, EmptyBlocksLeaveTheNormedEmbedding) {
  at::manual_seed(15);
  json c = tiny_text_config();
  Weights w = random_qwen3_5_weights(c);
  for (auto& [name, t] : w)
    if (name.find("o_proj") != std::string::npos || name.find("out_proj") != std::string::npos ||
        name.find("down_proj") != std::string::npos)
      t = at::zeros_like(t);
  at::Tensor ids = at::tensor({7, 2, 19}, at::kLong).view({1, 3});
  auto expected = [&](const at::Tensor& head) {
    std::vector<at::Tensor> rows;
    for (int64_t t = 0; t < 3; ++t) {
      at::Tensor e = w["embed_tokens.weight"][ids[0][t].item<int64_t>()];
      const double rms = std::sqrt((e * e).mean().item<double>() + 1e-6);
      rows.push_back(at::mv(head, e / rms * (1 + w["norm.weight"])));
    }
    return at::stack(rows, 0);
  };
  EXPECT_LT(max_diff(qwen3_5_moe_reference_logits(c, w, ids)[0], expected(w["lm_head.weight"])), 1e-12);
  c["tie_word_embeddings"] = true;
  w.erase("lm_head.weight");
  EXPECT_LT(max_diff(qwen3_5_moe_reference_logits(c, w, ids)[0], expected(w["embed_tokens.weight"])), 1e-12);
}

TEST(Qwen35Reference, NamesAMissingOrMisshapenWeight) {
  at::manual_seed(16);
  json c = tiny_text_config();
  Weights w = random_qwen3_5_weights(c);
  at::Tensor ids = at::zeros({1, 2}, at::kLong);
  Weights bad = w;
  bad["layers.1.linear_attn.in_proj_z.weight"] = at::zeros({5, 16}, kF64Options);
  try {
    qwen3_5_moe_reference_logits(c, bad, ids);
    ADD_FAILURE() << "a misshapen weight was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layers.1.linear_attn.in_proj_z.weight"), std::string::npos) << e.what();
  }
  bad = w;
  bad.erase("layers.2.mlp.experts.gate_up_proj");
  EXPECT_THROW(qwen3_5_moe_reference_logits(c, bad, ids), std::invalid_argument);
}

}  // namespace
}  // namespace glint
