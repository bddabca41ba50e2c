// Sanity checks of the DeepSeek-V3 float64 reference itself: hand-computed pieces (YaRN
// frequencies, routing, RoPE pairing) and structural properties of the whole forward pass
// (causality, row independence, equivalent weight layouts).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "reference_deepseek_v3.h"

namespace {

using glint::testing::DeepseekV3RefOptions;
using glint::testing::DeepseekV3Weights;
using json = nlohmann::json;

// Two layers (one dense, one MoE), two heads, q LoRA, 8 experts in 4 groups.
json tiny_config() {
  return json{{"model_type", "deepseek_v3"},
              {"vocab_size", 19},
              {"hidden_size", 16},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 2},
              {"num_key_value_heads", 2},
              {"q_lora_rank", 12},
              {"kv_lora_rank", 6},
              {"qk_nope_head_dim", 4},
              {"qk_rope_head_dim", 8},
              {"v_head_dim", 6},
              {"intermediate_size", 20},
              {"moe_intermediate_size", 5},
              {"n_routed_experts", 8},
              {"n_shared_experts", 1},
              {"n_group", 4},
              {"topk_group", 2},
              {"num_experts_per_tok", 3},
              {"first_k_dense_replace", 1},
              {"norm_topk_prob", true},
              {"routed_scaling_factor", 2.5},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", 10000.0},
              {"rope_interleave", true},
              {"attention_bias", false},
              {"tie_word_embeddings", false},
              {"max_position_embeddings", 64},
              {"hidden_act", "silu"}};
}

// Random weights under the Hub names for `cfg`; norm weights near 1, router bias small.
DeepseekV3Weights make_weights(const json& cfg, uint64_t seed) {
  auto c = glint::testing::deepseek_v3_ref_config(cfg);
  at::manual_seed(seed);
  auto o = at::TensorOptions().dtype(at::kDouble);
  auto lin = [&](int64_t out, int64_t in) { return at::randn({out, in}, o) / std::sqrt(double(in)); };
  auto norm = [&](int64_t d) { return 1.0 + 0.1 * at::randn({d}, o); };
  DeepseekV3Weights w;
  w["model.embed_tokens.weight"] = at::randn({c.vocab, c.hidden}, o);
  w["lm_head.weight"] = lin(c.vocab, c.hidden);
  w["model.norm.weight"] = norm(c.hidden);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w[p + "input_layernorm.weight"] = norm(c.hidden);
    w[p + "post_attention_layernorm.weight"] = norm(c.hidden);
    const std::string a = p + "self_attn.";
    if (c.q_lora_rank == 0) {
      w[a + "q_proj.weight"] = lin(c.heads * c.qk_head(), c.hidden);
    } else {
      w[a + "q_a_proj.weight"] = lin(c.q_lora_rank, c.hidden);
      w[a + "q_a_layernorm.weight"] = norm(c.q_lora_rank);
      w[a + "q_b_proj.weight"] = lin(c.heads * c.qk_head(), c.q_lora_rank);
    }
    w[a + "kv_a_proj_with_mqa.weight"] = lin(c.kv_lora_rank + c.qk_rope, c.hidden);
    w[a + "kv_a_layernorm.weight"] = norm(c.kv_lora_rank);
    w[a + "kv_b_proj.weight"] = lin(c.heads * (c.qk_nope + c.v_head), c.kv_lora_rank);
    w[a + "o_proj.weight"] = lin(c.hidden, c.heads * c.v_head);
    if (c.attention_bias) {
      if (c.q_lora_rank != 0) w[a + "q_a_proj.bias"] = 0.1 * at::randn({c.q_lora_rank}, o);
      w[a + "kv_a_proj_with_mqa.bias"] = 0.1 * at::randn({c.kv_lora_rank + c.qk_rope}, o);
      w[a + "o_proj.bias"] = 0.1 * at::randn({c.hidden}, o);
    }
    const std::string m = p + "mlp.";
    if (l < c.first_k_dense) {
      w[m + "gate_proj.weight"] = lin(c.intermediate, c.hidden);
      w[m + "up_proj.weight"] = lin(c.intermediate, c.hidden);
      w[m + "down_proj.weight"] = lin(c.hidden, c.intermediate);
    } else {
      w[m + "gate.weight"] = lin(c.n_routed, c.hidden);
      w[m + "gate.e_score_correction_bias"] = 0.1 * at::randn({c.n_routed}, o);
      for (int64_t e = 0; e < c.n_routed; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        w[x + "gate_proj.weight"] = lin(c.moe_intermediate, c.hidden);
        w[x + "up_proj.weight"] = lin(c.moe_intermediate, c.hidden);
        w[x + "down_proj.weight"] = lin(c.hidden, c.moe_intermediate);
      }
      const int64_t Is = c.moe_intermediate * c.n_shared;
      w[m + "shared_experts.gate_proj.weight"] = lin(Is, c.hidden);
      w[m + "shared_experts.up_proj.weight"] = lin(Is, c.hidden);
      w[m + "shared_experts.down_proj.weight"] = lin(c.hidden, Is);
    }
  }
  return w;
}

at::Tensor ids(std::vector<std::vector<int64_t>> rows) {
  at::Tensor t = at::empty({int64_t(rows.size()), int64_t(rows[0].size())}, at::kLong);
  for (size_t b = 0; b < rows.size(); ++b)
    for (size_t s = 0; s < rows[b].size(); ++s) t[b][s] = rows[b][s];
  return t;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// --- YaRN --------------------------------------------------------------------------------

// R = 8, theta = 1e4, factor 4, original 4096: correction dims 1.309 -> low 1 and 2.814 -> high 3,
// so the ramp over i = 0..3 is {0, 0, 0.5, 1} and the frequencies blend 1, 10^-1, 10^-2, 10^-3
// with their quarters.
TEST(DeepseekV3Reference, YarnInvFreqHandComputed) {
  auto inv = glint::testing::yarn_inv_freq_ref(8, 10000.0, 4.0, 4096.0, 32.0, 1.0, true);
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_NEAR(inv[0], 1.0, 1e-15);
  EXPECT_NEAR(inv[1], 0.1, 1e-15);
  EXPECT_NEAR(inv[2], 0.5 * 0.01 + 0.5 * 0.0025, 1e-15);
  EXPECT_NEAR(inv[3], 0.00025, 1e-15);
}

TEST(DeepseekV3Reference, YarnFactorOneIsPlainRope) {
  auto inv = glint::testing::yarn_inv_freq_ref(8, 10000.0, 1.0, 64.0);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(inv[i], std::pow(10000.0, -2.0 * i / 8.0), 1e-15);

  json plain = tiny_config();
  json yarn = tiny_config();
  yarn["rope_scaling"] = {{"type", "yarn"},          {"factor", 1.0},         {"original_max_position_embeddings", 64},
                          {"beta_fast", 32},         {"beta_slow", 1},        {"mscale", 1.0},
                          {"mscale_all_dim", 1.0}};
  auto c = glint::testing::deepseek_v3_ref_config(yarn);
  EXPECT_DOUBLE_EQ(c.attention_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.softmax_scale, 1.0 / std::sqrt(12.0));
  auto w = make_weights(plain, 1);
  at::Tensor x = ids({{3, 7, 1, 18, 0, 5}});
  EXPECT_LT(max_diff(glint::testing::deepseek_v3_reference_logits(plain, w, x),
                     glint::testing::deepseek_v3_reference_logits(yarn, w, x)),
            1e-12);
}

// mscale 0.707 vs mscale_all_dim 1.0 at factor 4: cos/sin carry (1 + 0.0707 ln 4) / (1 + 0.1 ln 4)
// and the softmax scale carries (1 + 0.1 ln 4)^2 = 1.29647699...; both spellings parse alike.
TEST(DeepseekV3Reference, YarnMscaleAndBothSpellings) {
  json a = tiny_config();
  a["rope_scaling"] = {{"type", "yarn"},  {"factor", 4},          {"original_max_position_embeddings", 16},
                       {"mscale", 0.707}, {"mscale_all_dim", 1.0}};
  json b = tiny_config();
  b.erase("rope_theta");
  b["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0},
                          {"factor", 4.0},       {"original_max_position_embeddings", 16},
                          {"mscale", 0.707},     {"mscale_all_dim", 1.0}};
  auto ca = glint::testing::deepseek_v3_ref_config(a), cb = glint::testing::deepseek_v3_ref_config(b);
  const double ln4 = 1.3862943611198906;
  EXPECT_NEAR(ca.attention_factor, (1.0 + 0.0707 * ln4) / (1.0 + 0.1 * ln4), 1e-15);
  EXPECT_NEAR(ca.softmax_scale * std::sqrt(12.0), 1.2964769928, 1e-9);
  EXPECT_EQ(ca.rope_type, "yarn");
  EXPECT_EQ(ca.inv_freq, cb.inv_freq);
  EXPECT_DOUBLE_EQ(ca.attention_factor, cb.attention_factor);
  EXPECT_DOUBLE_EQ(ca.softmax_scale, cb.softmax_scale);
  // The YaRN frequencies really differ from plain RoPE here.
  EXPECT_GT(std::abs(ca.inv_freq[3] - std::pow(10000.0, -0.75)), 1e-6);

  // Without mscale_all_dim the softmax scale is untouched and cos/sin take 1 + 0.1 ln f.
  json d = a;
  d["rope_scaling"].erase("mscale_all_dim");
  auto cd = glint::testing::deepseek_v3_ref_config(d);
  EXPECT_DOUBLE_EQ(cd.softmax_scale, 1.0 / std::sqrt(12.0));
  EXPECT_NEAR(cd.attention_factor, 1.0 + 0.1 * ln4, 1e-15);
}

// --- RoPE ---------------------------------------------------------------------------------

// x = e1 (second dim) at position 1 with frequencies {a, b}: interleaved, dim 1 pairs with dim 0
// (angle a) and lands in the odd half; rotate-half pairs it with dim 3 (angle b).
TEST(DeepseekV3Reference, RopePairingHandComputed) {
  const double a = 0.3, b = 0.05;
  at::Tensor x = at::zeros({4}, at::kDouble);
  x[1] = 1.0;
  auto inter = glint::testing::deepseek_v3_rope_ref(x, 1, {a, b}, 1.0, true);
  auto half = glint::testing::deepseek_v3_rope_ref(x, 1, {a, b}, 1.0, false);
  std::vector<double> want_inter = {-std::sin(a), 0.0, std::cos(a), 0.0};
  std::vector<double> want_half = {0.0, std::cos(b), 0.0, std::sin(b)};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(inter[i].item<double>(), want_inter[i], 1e-15) << i;
    EXPECT_NEAR(half[i].item<double>(), want_half[i], 1e-15) << i;
  }
  // attention_factor scales the rotated vector.
  auto scaled = glint::testing::deepseek_v3_rope_ref(x, 1, {a, b}, 1.5, true);
  EXPECT_NEAR(scaled[2].item<double>(), 1.5 * std::cos(a), 1e-15);
}

TEST(DeepseekV3Reference, RopeDependsOnlyOnRelativePosition) {
  at::manual_seed(3);
  at::Tensor q = at::randn({8}, at::kDouble), k = at::randn({8}, at::kDouble);
  auto inv = glint::testing::yarn_inv_freq_ref(8, 10000.0, 4.0, 16.0);
  for (bool inter : {true, false}) {
    auto dot = [&](int64_t pq, int64_t pk) {
      return at::dot(glint::testing::deepseek_v3_rope_ref(q, pq, inv, 1.0, inter),
                     glint::testing::deepseek_v3_rope_ref(k, pk, inv, 1.0, inter))
          .item<double>();
    };
    EXPECT_NEAR(dot(5, 2), dot(11, 8), 1e-12);
    EXPECT_GT(std::abs(dot(5, 2) - dot(5, 4)), 1e-6);
  }
}

// The transformers interleaved RoPE on weights W equals rotate-half RoPE on weights whose rope
// rows are reordered [even rows | odd rows] (per head for q, once for the shared k_rope).
TEST(DeepseekV3Reference, InterleaveEqualsRotateHalfOnPermutedRopeRows) {
  json inter = tiny_config();
  json half = tiny_config();
  half["rope_interleave"] = false;
  auto c = glint::testing::deepseek_v3_ref_config(inter);
  auto w = make_weights(inter, 7);
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < c.qk_rope / 2; ++i) perm.push_back(2 * i);
  for (int64_t i = 0; i < c.qk_rope / 2; ++i) perm.push_back(2 * i + 1);
  auto w2 = w;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string a = "model.layers." + std::to_string(l) + ".self_attn.";
    at::Tensor qb = w[a + "q_b_proj.weight"].clone(), kva = w[a + "kv_a_proj_with_mqa.weight"].clone();
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.qk_rope; ++i)
        qb[h * c.qk_head() + c.qk_nope + i].copy_(w[a + "q_b_proj.weight"][h * c.qk_head() + c.qk_nope + perm[i]]);
    for (int64_t i = 0; i < c.qk_rope; ++i)
      kva[c.kv_lora_rank + i].copy_(w[a + "kv_a_proj_with_mqa.weight"][c.kv_lora_rank + perm[i]]);
    w2[a + "q_b_proj.weight"] = qb;
    w2[a + "kv_a_proj_with_mqa.weight"] = kva;
  }
  at::Tensor x = ids({{4, 9, 2, 2, 17, 11, 0}});
  at::Tensor ref = glint::testing::deepseek_v3_reference_logits(inter, w, x);
  EXPECT_LT(max_diff(ref, glint::testing::deepseek_v3_reference_logits(half, w2, x)), 1e-12);
  EXPECT_GT(max_diff(ref, glint::testing::deepseek_v3_reference_logits(half, w, x)), 1e-6);
}

// --- Routing ------------------------------------------------------------------------------

// Four experts in two groups {0,1} {2,3}, one group kept, two experts chosen. With x = [1] the
// router weights are the logits: sigmoid = {.5, .1192, .7311, .0474}.
TEST(DeepseekV3Reference, RouterHandComputedFourExpertsTwoGroups) {
  at::Tensor W = at::empty({4, 1}, at::kDouble);
  W[0][0] = 0.0;
  W[1][0] = -2.0;
  W[2][0] = 1.0;
  W[3][0] = -3.0;
  at::Tensor x = at::ones({1}, at::kDouble);
  const double s0 = 0.5, s1 = sigmoid(-2.0), s2 = sigmoid(1.0), s3 = sigmoid(-3.0);

  // Group {2,3} sums to .7785 > .6192, so expert 3 is chosen over the better expert 0.
  auto r = glint::testing::deepseek_v3_route_ref(W, at::Tensor(), x, 2, 2, 1, true, 2.5);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].first, 2);
  EXPECT_EQ(r[1].first, 3);
  EXPECT_NEAR(r[0].second, 2.5 * s2 / (s2 + s3), 1e-14);
  EXPECT_NEAR(r[1].second, 2.5 * s3 / (s2 + s3), 1e-14);
  EXPECT_NEAR(r[0].second + r[1].second, 2.5, 1e-14);

  // A +0.5 bias on expert 0 moves the choice to group {0,1}; weights stay unbiased sigmoids.
  at::Tensor bias = at::zeros({4}, at::kDouble);
  bias[0] = 0.5;
  r = glint::testing::deepseek_v3_route_ref(W, bias, x, 2, 2, 1, false, 2.5);
  EXPECT_EQ(r[0].first, 0);
  EXPECT_EQ(r[1].first, 1);
  EXPECT_NEAR(r[0].second, 2.5 * s0, 1e-14);
  EXPECT_NEAR(r[1].second, 2.5 * s1, 1e-14);

  // Groups rank by the sum of their two best scores, not by their best one: expert 0 has the
  // highest score (.8808) but group {0,1} sums to .8988 against .7311 + .6225 = 1.3536.
  at::Tensor W2 = at::empty({4, 1}, at::kDouble);
  W2[0][0] = 2.0;
  W2[1][0] = -4.0;
  W2[2][0] = 1.0;
  W2[3][0] = 0.5;
  r = glint::testing::deepseek_v3_route_ref(W2, at::Tensor(), x, 1, 2, 1, false, 2.5);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].first, 2);
  EXPECT_NEAR(r[0].second, 2.5 * s2, 1e-14);

  // With all choice scores pushed below zero the mask value decides: -inf keeps the choice inside
  // group {2,3}; 0.0 (older transformers) lets the masked experts 0 and 1 win.
  at::Tensor neg = at::full({4}, -1.0, at::kDouble);
  r = glint::testing::deepseek_v3_route_ref(W, neg, x, 2, 2, 1, true, 1.0);
  EXPECT_EQ(r[0].first, 2);
  EXPECT_EQ(r[1].first, 3);
  r = glint::testing::deepseek_v3_route_ref(W, neg, x, 2, 2, 1, true, 1.0, 0.0);
  std::set<int64_t> chosen = {r[0].first, r[1].first};
  EXPECT_EQ(chosen, (std::set<int64_t>{0, 1}));
  EXPECT_NEAR(r[0].second + r[1].second, 1.0, 1e-14);
}

TEST(DeepseekV3Reference, RouterStaysInKeptGroupsAndSumsToScaling) {
  at::manual_seed(11);
  at::Tensor W = at::randn({8, 16}, at::kDouble), bias = 0.3 * at::randn({8}, at::kDouble);
  int spans_two_groups = 0;
  for (int t = 0; t < 40; ++t) {
    at::Tensor x = at::randn({16}, at::kDouble);
    auto r = glint::testing::deepseek_v3_route_ref(W, bias, x, 3, 4, 2, true, 2.5);
    ASSERT_EQ(r.size(), 3u);
    std::set<int64_t> groups, experts;
    double sum = 0;
    for (auto& [e, wt] : r) {
      groups.insert(e / 2);
      experts.insert(e);
      sum += wt;
    }
    EXPECT_LE(groups.size(), 2u);
    EXPECT_EQ(experts.size(), 3u);
    EXPECT_NEAR(sum, 2.5, 1e-12);
    spans_two_groups += groups.size() == 2;
    // Unnormalised weights are the plain sigmoids times the scaling factor.
    auto u = glint::testing::deepseek_v3_route_ref(W, bias, x, 3, 4, 2, false, 2.5);
    for (size_t i = 0; i < u.size(); ++i) {
      EXPECT_EQ(u[i].first, r[i].first);
      EXPECT_NEAR(u[i].second, 2.5 * sigmoid(at::dot(W[u[i].first], x).item<double>()), 1e-12);
    }
  }
  EXPECT_GT(spans_two_groups, 0);
}

// --- Whole forward ------------------------------------------------------------------------

TEST(DeepseekV3Reference, ShapeAndCausality) {
  json cfg = tiny_config();
  auto w = make_weights(cfg, 5);
  at::Tensor a = ids({{1, 2, 3, 4, 5, 6, 7}}), b = a.clone();
  b[0][4] = 12;
  at::Tensor la = glint::testing::deepseek_v3_reference_logits(cfg, w, a);
  at::Tensor lb = glint::testing::deepseek_v3_reference_logits(cfg, w, b);
  ASSERT_EQ(la.sizes(), (at::IntArrayRef{1, 7, 19}));
  EXPECT_EQ(la.scalar_type(), at::kDouble);
  EXPECT_TRUE(at::isfinite(la).all().item<bool>());
  EXPECT_LT(max_diff(la.narrow(1, 0, 4), lb.narrow(1, 0, 4)), 1e-13);
  for (int64_t t = 4; t < 7; ++t) EXPECT_GT(max_diff(la[0][t], lb[0][t]), 1e-6) << t;
}

TEST(DeepseekV3Reference, BatchRowsAreIndependent) {
  json cfg = tiny_config();
  auto w = make_weights(cfg, 6);
  at::Tensor both = ids({{3, 1, 4, 1, 5}, {9, 2, 6, 5, 3}});
  at::Tensor l = glint::testing::deepseek_v3_reference_logits(cfg, w, both);
  EXPECT_LT(max_diff(l[0], glint::testing::deepseek_v3_reference_logits(cfg, w, both.narrow(0, 0, 1))[0]), 1e-13);
  EXPECT_LT(max_diff(l[1], glint::testing::deepseek_v3_reference_logits(cfg, w, both.narrow(0, 1, 1))[0]), 1e-13);
  EXPECT_GT(max_diff(l[0], l[1]), 1e-6);
}

// With one token the softmax has a single key, so attention is o_proj of each head's value,
// whatever q, k, RoPE and the softmax scale are.
TEST(DeepseekV3Reference, SingleTokenAttentionIsOProjOfValues) {
  json cfg = tiny_config();
  auto c = glint::testing::deepseek_v3_ref_config(cfg);
  auto w = make_weights(cfg, 8);
  at::manual_seed(9);
  at::Tensor x = at::randn({1, c.hidden}, at::kDouble);
  const std::string a = "model.layers.0.self_attn.";
  at::Tensor kva = at::mv(w[a + "kv_a_proj_with_mqa.weight"], x[0]);
  at::Tensor lat = kva.narrow(0, 0, c.kv_lora_rank);
  lat = lat / std::sqrt((lat * lat).mean().item<double>() + 1e-6) * w[a + "kv_a_layernorm.weight"];
  at::Tensor kvb = at::mv(w[a + "kv_b_proj.weight"], lat);
  at::Tensor v = at::empty({c.heads * c.v_head}, at::kDouble);
  for (int64_t h = 0; h < c.heads; ++h)
    v.narrow(0, h * c.v_head, c.v_head).copy_(kvb.narrow(0, h * (c.qk_nope + c.v_head) + c.qk_nope, c.v_head));
  at::Tensor want = at::mv(w[a + "o_proj.weight"], v);
  EXPECT_LT(max_diff(glint::testing::deepseek_v3_attention_ref(c, w, 0, x)[0], want), 1e-13);
}

// q_a_layernorm and kv_a_layernorm keep eps 1e-6 whatever rms_norm_eps says, so attention alone
// does not depend on rms_norm_eps.
TEST(DeepseekV3Reference, LatentNormsIgnoreRmsNormEps) {
  json cfg = tiny_config();
  json big_eps = tiny_config();
  big_eps["rms_norm_eps"] = 0.5;
  auto c = glint::testing::deepseek_v3_ref_config(cfg), cb = glint::testing::deepseek_v3_ref_config(big_eps);
  auto w = make_weights(cfg, 16);
  at::manual_seed(17);
  at::Tensor x = 0.3 * at::randn({4, c.hidden}, at::kDouble);
  EXPECT_LT(max_diff(glint::testing::deepseek_v3_attention_ref(c, w, 1, x),
                     glint::testing::deepseek_v3_attention_ref(cb, w, 1, x)),
            1e-15);
  // The decoder norms do read it.
  at::Tensor t = ids({{1, 2, 3}});
  EXPECT_GT(max_diff(glint::testing::deepseek_v3_reference_logits(cfg, w, t),
                     glint::testing::deepseek_v3_reference_logits(big_eps, w, t)),
            1e-6);
}

// q_lora_rank = null reads q_proj. With input norms of weight 1, a q_a_proj of identity and a
// q_a_layernorm of ones are (to eps) the identity, so q_proj = q_b_proj gives the same logits.
TEST(DeepseekV3Reference, PlainQProjMatchesIdentityLora) {
  json lora = tiny_config();
  lora["q_lora_rank"] = 16;
  json plain = tiny_config();
  plain["q_lora_rank"] = nullptr;
  auto w = make_weights(lora, 10);
  for (int64_t l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w[p + "input_layernorm.weight"] = at::ones({16}, at::kDouble);
    w[p + "self_attn.q_a_proj.weight"] = at::eye(16, at::kDouble);
    w[p + "self_attn.q_a_layernorm.weight"] = at::ones({16}, at::kDouble);
  }
  auto wp = w;
  for (int64_t l = 0; l < 2; ++l) {
    const std::string a = "model.layers." + std::to_string(l) + ".self_attn.";
    wp[a + "q_proj.weight"] = w[a + "q_b_proj.weight"];
    wp.erase(a + "q_a_proj.weight");
    wp.erase(a + "q_a_layernorm.weight");
    wp.erase(a + "q_b_proj.weight");
  }
  at::Tensor x = ids({{0, 5, 10, 15, 3}});
  at::Tensor ref = glint::testing::deepseek_v3_reference_logits(lora, w, x);
  EXPECT_LT(max_diff(ref, glint::testing::deepseek_v3_reference_logits(plain, wp, x)), 1e-5);
  EXPECT_THROW(glint::testing::deepseek_v3_reference_logits(plain, w, x), std::runtime_error);
}

TEST(DeepseekV3Reference, AttentionBiasIsRead) {
  json nob = tiny_config();
  json withb = tiny_config();
  withb["attention_bias"] = true;
  auto w = make_weights(nob, 12);
  at::Tensor x = ids({{2, 4, 6, 8}});
  at::Tensor ref = glint::testing::deepseek_v3_reference_logits(nob, w, x);
  auto wz = w;
  for (int64_t l = 0; l < 2; ++l) {
    const std::string a = "model.layers." + std::to_string(l) + ".self_attn.";
    wz[a + "q_a_proj.bias"] = at::zeros({12}, at::kDouble);
    wz[a + "kv_a_proj_with_mqa.bias"] = at::zeros({14}, at::kDouble);
    wz[a + "o_proj.bias"] = at::zeros({16}, at::kDouble);
  }
  EXPECT_LT(max_diff(ref, glint::testing::deepseek_v3_reference_logits(withb, wz, x)), 1e-14);
  for (const char* k : {"q_a_proj.bias", "kv_a_proj_with_mqa.bias", "o_proj.bias"}) {
    auto wb = wz;
    wb[std::string("model.layers.1.self_attn.") + k].fill_(0.2);
    EXPECT_GT(max_diff(ref, glint::testing::deepseek_v3_reference_logits(withb, wb, x)), 1e-6) << k;
    // Without attention_bias in the config the same biases are ignored.
    EXPECT_LT(max_diff(ref, glint::testing::deepseek_v3_reference_logits(nob, wb, x)), 1e-14) << k;
  }
}

TEST(DeepseekV3Reference, TiedEmbeddingsUseEmbedTable) {
  json untied = tiny_config();
  json tied = tiny_config();
  tied["tie_word_embeddings"] = true;
  auto w = make_weights(untied, 13);
  w["lm_head.weight"] = w["model.embed_tokens.weight"];
  auto wt = w;
  wt.erase("lm_head.weight");
  at::Tensor x = ids({{7, 7, 1}});
  EXPECT_LT(max_diff(glint::testing::deepseek_v3_reference_logits(untied, w, x),
                     glint::testing::deepseek_v3_reference_logits(tied, wt, x)),
            1e-14);
}

// first_k_dense_replace decides which layers read routed experts.
TEST(DeepseekV3Reference, DenseLayersNeedNoExpertsAndMoeLayersDo) {
  json dense = tiny_config();
  dense["first_k_dense_replace"] = 2;
  auto w = make_weights(dense, 14);
  at::Tensor x = ids({{1, 3, 5}});
  EXPECT_NO_THROW(glint::testing::deepseek_v3_reference_logits(dense, w, x));
  json moe = tiny_config();
  EXPECT_THROW(glint::testing::deepseek_v3_reference_logits(moe, w, x), std::runtime_error);
  auto wm = make_weights(moe, 14);
  wm.erase("model.layers.1.mlp.shared_experts.up_proj.weight");
  EXPECT_THROW(glint::testing::deepseek_v3_reference_logits(moe, wm, x), std::runtime_error);
}

// Non-negative correction biases keep every kept choice score above 0, so both mask values agree;
// strongly negative ones make them disagree.
TEST(DeepseekV3Reference, MaskValueMattersOnlyForNegativeChoiceScores) {
  json cfg = tiny_config();
  auto w = make_weights(cfg, 15);
  at::Tensor x = ids({{0, 1, 2, 3, 4, 5, 6, 7, 8}});
  DeepseekV3RefOptions zero;
  zero.masked_choice_score = 0.0;
  w["model.layers.1.mlp.gate.e_score_correction_bias"] = 0.1 * at::arange(8, at::kDouble);
  EXPECT_LT(max_diff(glint::testing::deepseek_v3_reference_logits(cfg, w, x),
                     glint::testing::deepseek_v3_reference_logits(cfg, w, x, zero)),
            1e-14);
  w["model.layers.1.mlp.gate.e_score_correction_bias"] = at::full({8}, -2.0, at::kDouble);
  EXPECT_GT(max_diff(glint::testing::deepseek_v3_reference_logits(cfg, w, x),
                     glint::testing::deepseek_v3_reference_logits(cfg, w, x, zero)),
            1e-6);
}

}  // namespace
