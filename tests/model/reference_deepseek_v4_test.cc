// Sanity checks of the DeepSeek-V4 float64 reference itself: causality of the whole model (the
// compressors and the indexer are where it could break), the exact window / visibility
// boundaries of HCA and CSA entries, Sinkhorn and the hyper-connection algebra, routing, pooling
// and YaRN against hand-computed values, and agreement of the two config spellings.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "model/reference_deepseek_v4.h"

namespace glint {
namespace {

using namespace glint::testing;
using namespace glint::testing::dsv4_ref;
using nlohmann::json;
using WeightMap = std::map<std::string, at::Tensor>;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Deterministic per name, so two configs that share a weight's name and shape share its values.
at::Tensor randn(const std::string& name, std::vector<int64_t> shape, double scale, double mean = 0.0) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kDouble));
  std::mt19937_64 gen(fnv1a(name));
  std::normal_distribution<double> nd(0.0, 1.0);
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = mean + scale * nd(gen);
  return t;
}

WeightMap make_weights(const json& cfg_json) {
  const Config c = parse_config(cfg_json);
  const int64_t H = c.hidden, hc = c.hc, D = c.head_dim, mix = (2 + hc) * hc, I = c.inter;
  WeightMap w;
  auto add = [&](const std::string& n, std::vector<int64_t> shape, double scale, double mean = 0.0) {
    w[n] = randn(n, shape, scale, mean);
  };
  auto lin = [&](const std::string& n, int64_t out, int64_t in, double gain = 1.0) {
    add(n, {out, in}, gain / std::sqrt(double(in)));
  };
  add("model.embed_tokens.weight", {c.vocab, H}, 1.0);
  lin("lm_head.weight", c.vocab, H);
  add("model.norm.weight", {H}, 0.1, 1.0);
  lin("model.hc_head.hc_fn", hc, hc * H, 0.5);
  add("model.hc_head.hc_base", {hc}, 0.5);
  add("model.hc_head.hc_scale", {1}, 0.2, 1.0);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".", a = p + "self_attn.", f = p + "mlp.";
    add(p + "input_layernorm.weight", {H}, 0.1, 1.0);
    add(p + "post_attention_layernorm.weight", {H}, 0.1, 1.0);
    for (const char* site : {"attn_hc.", "ffn_hc."}) {
      lin(p + site + "fn", mix, hc * H, 1.0);
      add(p + site + "base", {mix}, 0.5);
      add(p + site + "scale", {3}, 0.2, 1.0);
    }
    lin(a + "q_a_proj.weight", c.q_lora, H);
    add(a + "q_a_norm.weight", {c.q_lora}, 0.1, 1.0);
    lin(a + "q_b_proj.weight", c.heads * D, c.q_lora);
    lin(a + "kv_proj.weight", D, H);
    add(a + "kv_norm.weight", {D}, 0.1, 1.0);
    lin(a + "o_a_proj.weight", c.o_groups * c.o_lora, c.heads * D / c.o_groups);
    lin(a + "o_b_proj.weight", H, c.o_groups * c.o_lora);
    add(a + "sinks", {c.heads}, 1.0);
    auto compressor = [&](const std::string& q, int64_t m, int64_t dim, bool overlap) {
      const int64_t C = overlap ? 2 * dim : dim;
      lin(q + "kv_proj.weight", C, H);
      lin(q + "gate_proj.weight", C, H, 2.0);
      add(q + "position_bias", {m, C}, 1.0);
      add(q + "kv_norm.weight", {dim}, 0.1, 1.0);
    };
    if (c.layer_types[l] == kHca) compressor(a + "compressor.", c.rate_hca, D, false);
    if (c.layer_types[l] == kCsa) {
      compressor(a + "compressor.", c.rate_csa, D, true);
      compressor(a + "compressor.indexer.", c.rate_csa, c.index_head_dim, true);
      lin(a + "compressor.indexer.q_b_proj.weight", c.index_heads * c.index_head_dim, c.q_lora);
      lin(a + "compressor.indexer.scorer.weights_proj.weight", c.index_heads, H);
    }
    lin(f + "gate.weight", c.experts, H, 2.0);
    if (c.mlp_layer_types[l] == "hash_moe") {
      at::Tensor t = at::empty({c.vocab, c.top_k}, at::TensorOptions().dtype(at::kLong));
      std::mt19937_64 gen(fnv1a(f + "gate.tid2eid"));
      for (int64_t v = 0; v < c.vocab; ++v) {
        std::vector<int64_t> e(c.experts);
        std::iota(e.begin(), e.end(), 0);
        std::shuffle(e.begin(), e.end(), gen);
        for (int64_t k = 0; k < c.top_k; ++k) t[v][k] = e[k];
      }
      w[f + "gate.tid2eid"] = t;
    } else {
      add(f + "gate.e_score_correction_bias", {c.experts}, 0.3);
    }
    add(f + "experts.gate_up_proj", {c.experts, 2 * I, H}, 2.0 / std::sqrt(double(H)));
    add(f + "experts.down_proj", {c.experts, H, I}, 1.0 / std::sqrt(double(I)));
    lin(f + "shared_experts.gate_proj.weight", I, H, 2.0);
    lin(f + "shared_experts.up_proj.weight", I, H, 2.0);
    lin(f + "shared_experts.down_proj.weight", H, I);
  }
  return w;
}

// Four layers (sliding, CSA, HCA, CSA), written as a released config.json writes them.
json legacy_config() {
  return json{{"model_type", "deepseek_v4"},
              {"vocab_size", 29},
              {"hidden_size", 16},
              {"num_hidden_layers", 4},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 1},
              {"head_dim", 8},
              {"qk_rope_head_dim", 4},
              {"q_lora_rank", 8},
              {"o_groups", 2},
              {"o_lora_rank", 6},
              {"n_routed_experts", 4},
              {"num_experts_per_tok", 2},
              {"n_shared_experts", 1},
              {"moe_intermediate_size", 6},
              {"scoring_func", "sqrtsoftplus"},
              {"topk_method", "noaux_tc"},
              {"norm_topk_prob", true},
              {"routed_scaling_factor", 1.5},
              {"num_hash_layers", 1},
              {"swiglu_limit", 0.8},
              {"hc_mult", 2},
              {"hc_sinkhorn_iters", 20},
              {"hc_eps", 1e-6},
              {"sliding_window", 3},
              {"compress_ratios", {0, 4, 128, 4, 0}},
              {"compress_rate_hca", 8},
              {"index_n_heads", 2},
              {"index_head_dim", 8},
              {"index_topk", 2},
              {"rope_theta", 10000.0},
              {"compress_rope_theta", 160000.0},
              {"max_position_embeddings", 1024},
              {"rope_scaling",
               {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 64}, {"beta_fast", 32},
                {"beta_slow", 1}}},
              {"rms_norm_eps", 1e-6},
              {"tie_word_embeddings", false}};
}

// The same model in transformers v5's own spelling.
json current_config() {
  json c = legacy_config();
  for (const char* k : {"compress_ratios", "compress_rate_hca", "num_hash_layers", "qk_rope_head_dim", "rope_scaling"})
    c.erase(k);
  c["layer_types"] = {kSliding, kCsa, kHca, kCsa};
  c["compress_rates"] = {{kCsa, 4}, {kHca, 8}};
  c["mlp_layer_types"] = {"hash_moe", "moe", "moe", "moe"};
  c["partial_rotary_factor"] = 0.5;
  c["rope_parameters"] = {
      {"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}}},
      {"compress",
       {{"rope_type", "yarn"}, {"rope_theta", 160000.0}, {"partial_rotary_factor", 0.5}, {"factor", 16.0},
        {"original_max_position_embeddings", 64}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
        {"attention_factor", 1.0}}}};
  return c;
}

at::Tensor ids_tensor(const std::vector<std::vector<int64_t>>& rows) {
  at::Tensor t = at::empty({int64_t(rows.size()), int64_t(rows[0].size())}, at::TensorOptions().dtype(at::kLong));
  for (size_t b = 0; b < rows.size(); ++b)
    for (size_t s = 0; s < rows[b].size(); ++s) t[b][s] = rows[b][s];
  return t;
}

std::vector<int64_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<int64_t> v(n);
  for (auto& x : v) x = int64_t(gen() % uint64_t(vocab));
  return v;
}

// Largest |a - b| per position of row 0: [S].
std::vector<double> row_diffs(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor d = (a[0] - b[0]).abs().amax(-1);
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

TEST(DeepseekV4Reference, ConfigSpellingsAgree) {
  const json legacy = legacy_config(), current = current_config();
  const Config a = parse_config(legacy), b = parse_config(current);
  EXPECT_EQ(a.layer_types, b.layer_types);
  EXPECT_EQ(a.mlp_layer_types, b.mlp_layer_types);
  EXPECT_EQ(a.rate_hca, 8);
  EXPECT_EQ(a.rope_compress.rope_dims(), 4);
  EXPECT_EQ(a.rope_compress.attention_scaling, 1.0);  // forced for a YaRN compress rope
  // Without the forced value, YaRN's own mscale would scale cos and sin.
  json nested = current;
  nested["rope_parameters"]["compress"].erase("attention_factor");
  EXPECT_NEAR(parse_config(nested).rope_compress.attention_scaling, 0.1 * std::log(16.0) + 1.0, 1e-15);
  // A ratio the legacy list cannot express is refused, as transformers does.
  json bad = legacy;
  bad["compress_ratios"] = {0, 4, 8, 4};
  EXPECT_THROW(parse_config(bad), std::invalid_argument);

  const WeightMap w = make_weights(legacy);
  const at::Tensor ids = ids_tensor({random_ids(20, 29, 1)});
  const at::Tensor la = deepseek_v4_reference_logits(legacy, w, ids);
  const at::Tensor lb = deepseek_v4_reference_logits(current, w, ids);
  ASSERT_EQ(la.sizes().vec(), (std::vector<int64_t>{1, 20, 29}));
  EXPECT_TRUE(la.isfinite().all().item<bool>());
  EXPECT_LT((la - lb).abs().max().item<double>(), 1e-12);
  // The legacy weights_proj path of older commits is accepted too.
  WeightMap w_old = w;
  for (int l : {1, 3}) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.compressor.indexer.";
    w_old[p + "weights_proj.weight"] = w_old.at(p + "scorer.weights_proj.weight");
    w_old.erase(p + "scorer.weights_proj.weight");
  }
  EXPECT_LT((deepseek_v4_reference_logits(legacy, w_old, ids) - la).abs().max().item<double>(), 1e-15);
}

// Changing token t changes no logit before t (bit for bit) and does change t's; the other row
// of the batch does not move. Sliding window 3 with CSA (index_topk 2 of up to 5 entries) and
// HCA (rate 8) layers, so compressed entries and the indexer's selection are exercised.
TEST(DeepseekV4Reference, Causal) {
  const json cfg = legacy_config();
  const WeightMap w = make_weights(cfg);
  const std::vector<int64_t> r0 = random_ids(20, 29, 7), r1 = random_ids(20, 29, 8);
  const at::Tensor base = deepseek_v4_reference_logits(cfg, w, ids_tensor({r0, r1}));
  for (int64_t t : {0, 3, 7, 12, 19}) {
    std::vector<int64_t> changed = r0;
    changed[t] = (changed[t] + 5) % 29;
    const at::Tensor out = deepseek_v4_reference_logits(cfg, w, ids_tensor({changed, r1}));
    const std::vector<double> d = row_diffs(out, base);
    for (int64_t s = 0; s < t; ++s) EXPECT_EQ(d[s], 0.0) << "token " << t << " moved logit " << s;
    EXPECT_GT(d[t], 1e-6) << "token " << t;
    EXPECT_EQ((out[1] - base[1]).abs().max().item<double>(), 0.0);
  }
}

// One compressed layer, sliding window 2 (keys t-1, t), rate 4: which positions a token reaches
// fixes the window alignment and the visibility rule w < (t+1)/m. Token 4 (window 1) reaches
// 4, 5 through the window, not 6, and 7 on through entry 1. Token 0 (window 0) reaches 0, 1,
// not 2, and 3 on through entry 0.
void check_boundaries(const json& cfg) {
  const WeightMap w = make_weights(cfg);
  const std::vector<int64_t> ids = random_ids(13, 29, 3);
  const at::Tensor base = deepseek_v4_reference_logits(cfg, w, ids_tensor({ids}));
  auto reached = [&](int64_t tok) {
    std::vector<int64_t> changed = ids;
    changed[tok] = (changed[tok] + 11) % 29;
    std::vector<double> d = row_diffs(deepseek_v4_reference_logits(cfg, w, ids_tensor({changed})), base);
    std::vector<int> r;
    for (double x : d) r.push_back(x > 1e-9 ? 1 : (x == 0.0 ? 0 : -1));
    return r;
  };
  EXPECT_EQ(reached(4), (std::vector<int>{0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(reached(0), (std::vector<int>{1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
}

json one_layer(const char* type) {
  json c = current_config();
  c["num_hidden_layers"] = 1;
  c["layer_types"] = {type};
  c["mlp_layer_types"] = {"moe"};
  c["compress_rates"] = {{kCsa, 4}, {kHca, 4}};
  c["sliding_window"] = 2;
  c["index_topk"] = 64;  // every causal entry selected: only the visibility rule decides
  return c;
}

TEST(DeepseekV4Reference, HcaWindowBoundaries) { check_boundaries(one_layer(kHca)); }
TEST(DeepseekV4Reference, CsaWindowBoundaries) { check_boundaries(one_layer(kCsa)); }

// With four identical streams, a column-stochastic comb, equal post weights and pre weights
// summing to s, the streams stay identical, so the model equals the one-stream model whose
// pre weight is s. fn = 0 and hc_eps = 0 make all of it exact.
TEST(DeepseekV4Reference, FourIdenticalStreamsReduceToOne) {
  auto config = [](int64_t hc) {
    json c = legacy_config();
    c["hc_mult"] = hc;
    c["hc_eps"] = 0.0;
    return c;
  };
  const json c4 = config(4), c1 = config(1);
  WeightMap w4 = make_weights(c4), w1 = make_weights(c1);
  auto set_hc = [](WeightMap& w, const std::string& prefix, int64_t hc, int64_t H, bool head) {
    const double pre_logit = hc == 4 ? std::log(0.25) : std::log(4.0);  // sigmoid: 0.2 each, or 0.8
    if (head) {
      w[prefix + "hc_fn"] = at::zeros({hc, hc * H}, at::kDouble);
      w[prefix + "hc_base"] = at::full({hc}, pre_logit, at::kDouble);
      return;
    }
    const int64_t mix = (2 + hc) * hc;
    w[prefix + "fn"] = at::zeros({mix, hc * H}, at::kDouble);
    at::Tensor base = randn(prefix + "comb", {mix}, 1.0);  // comb logits stay random
    base.narrow(0, 0, hc).fill_(pre_logit);
    base.narrow(0, hc, hc).fill_(0.3);
    w[prefix + "base"] = base;
  };
  using Site = std::pair<WeightMap*, int64_t>;
  for (auto [w, hc] : {Site{&w4, 4}, Site{&w1, 1}}) {
    for (int l = 0; l < 4; ++l)
      for (const char* site : {"attn_hc.", "ffn_hc."})
        set_hc(*w, "model.layers." + std::to_string(l) + "." + site, hc, 16, false);
    set_hc(*w, "model.hc_head.", hc, 16, true);
  }
  const at::Tensor ids = ids_tensor({random_ids(20, 29, 5)});
  const at::Tensor l4 = deepseek_v4_reference_logits(c4, w4, ids), l1 = deepseek_v4_reference_logits(c1, w1, ids);
  EXPECT_LT((l4 - l1).abs().max().item<double>(), 1e-10 * (1.0 + l1.abs().max().item<double>()));
}

TEST(DeepseekV4Reference, SinkhornIsDoublyStochastic) {
  Vec logits = {0.3, -1.2, 2.0, 0.5, 1.1, 0.0, -0.7, 0.9, -2.0, 0.4, 1.5, -0.3, 0.8, 0.8, -1.0, 2.5};
  auto sums = [](const Vec& c, bool rows) {
    Vec s(4, 0.0);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) s[rows ? i : j] += c[i * 4 + j];
    return s;
  };
  const Vec c = sinkhorn(logits, 4, 20, 1e-6);
  for (double s : sums(c, true)) EXPECT_NEAR(s, 1.0, 1e-5);
  for (double s : sums(c, false)) EXPECT_NEAR(s, 1.0, 1e-5);
  const Vec exact = sinkhorn(logits, 4, 300, 0.0);
  for (double s : sums(exact, true)) EXPECT_NEAR(s, 1.0, 1e-12);
  for (double s : sums(exact, false)) EXPECT_NEAR(s, 1.0, 1e-12);
  // Not symmetric, so the direction in which comb mixes the streams matters.
  EXPECT_GT(std::abs(c[1] - c[4]), 1e-2);
  // One iteration is the softmax rows (+ eps) normalised by columns only.
  const Vec one = sinkhorn(logits, 4, 1, 0.0);
  for (double s : sums(one, false)) EXPECT_NEAR(s, 1.0, 1e-14);
  double z0 = 0;
  for (int j = 0; j < 4; ++j) z0 += std::exp(logits[j]);
  double col0 = 0;
  for (int i = 0; i < 4; ++i) {
    double zi = 0;
    for (int j = 0; j < 4; ++j) zi += std::exp(logits[i * 4 + j]);
    col0 += std::exp(logits[i * 4]) / zi;
  }
  EXPECT_NEAR(one[0], std::exp(logits[0]) / z0 / col0, 1e-15);
}

TEST(DeepseekV4Reference, HyperConnectionHand) {
  // X'_k = post_k y + sum_j comb[j][k] X_j with comb = [[0.9, 0.1], [0.3, 0.7]].
  HcWeights w;
  w.post = {0.5, 2.0};
  w.comb = {0.9, 0.1, 0.3, 0.7};
  Vec streams = {1.0, 10.0};  // hc 2, H 1
  const Vec y = {4.0};
  hc_expand(streams.data(), w, y.data(), 1);
  EXPECT_NEAR(streams[0], 0.5 * 4 + 0.9 * 1 + 0.3 * 10, 1e-15);
  EXPECT_NEAR(streams[1], 2.0 * 4 + 0.1 * 1 + 0.7 * 10, 1e-15);
  // fn = 0: pre = sigmoid(base) + eps, post = 2 sigmoid(base) (no eps).
  Mat fn;
  at::Tensor z = at::zeros({8, 2}, at::kDouble);
  fn.keep = z;
  fn.p = z.data_ptr<double>();
  fn.rows = 8;
  fn.cols = 2;
  const HcWeights h = hc_weights(streams.data(), 2, 1, fn, {0.0, std::log(3.0), 0.0, 0.0, 0, 0, 0, 0},
                                 {1.0, 1.0, 1.0}, 1e-6, 0.01, 20);
  EXPECT_NEAR(h.pre[0], 0.51, 1e-15);
  EXPECT_NEAR(h.pre[1], 0.76, 1e-15);
  EXPECT_NEAR(h.post[0], 1.0, 1e-15);
}

TEST(DeepseekV4Reference, RopeIsInterleavedOnTheLastDims) {
  RopeTable r;
  r.inv_freq = {1.0};
  Vec x = {1.0, 2.0, 3.0, 4.0};
  const double half_pi = 1.5707963267948966;
  apply_rope(x.data(), 4, r, half_pi);
  EXPECT_EQ(x[0], 1.0);
  EXPECT_EQ(x[1], 2.0);
  EXPECT_NEAR(x[2], -4.0, 1e-15);  // 3 cos - 4 sin
  EXPECT_NEAR(x[3], 3.0, 1e-15);   // 4 cos + 3 sin
  apply_rope(x.data(), 4, r, half_pi, -1.0);  // the de-rotation of the attention output
  EXPECT_NEAR(x[2], 3.0, 1e-15);
  EXPECT_NEAR(x[3], 4.0, 1e-15);
}

TEST(DeepseekV4Reference, YarnForTheReleasedCompressRope) {
  const json p = {{"rope_type", "yarn"}, {"rope_theta", 160000.0}, {"partial_rotary_factor", 0.125},
                  {"factor", 16.0}, {"original_max_position_embeddings", 65536}, {"beta_fast", 32},
                  {"beta_slow", 1}, {"attention_factor", 1.0}};
  const RopeTable r = rope_from_params(p, 512, 1048576.0);
  ASSERT_EQ(r.inv_freq.size(), 32u);
  // 64 ln(65536 / (beta 2 pi)) / (2 ln 160000) = 15.45 (beta 32) and 24.71 (beta 1): low 15, high 25.
  auto extrap = [](int i) { return std::pow(160000.0, -2.0 * i / 64.0); };
  EXPECT_NEAR(r.inv_freq[0], 1.0, 1e-15);
  EXPECT_NEAR(r.inv_freq[15], extrap(15), 1e-18);
  EXPECT_NEAR(r.inv_freq[20], 0.5 * extrap(20) + 0.5 * extrap(20) / 16.0, 1e-18);
  EXPECT_NEAR(r.inv_freq[25], extrap(25) / 16.0, 1e-18);
  EXPECT_NEAR(r.inv_freq[31], extrap(31) / 16.0, 1e-20);
  EXPECT_EQ(r.attention_scaling, 1.0);
}

TEST(DeepseekV4Reference, SqrtSoftplusRoutingHand) {
  // s = sqrt(log1p(exp(logit))) = {0.83255, 1.14598, 0.55970, 1.45840}; the bias picks expert 2
  // over 1, but the weights are the unbiased s, renormalised, times 1.5.
  auto r = route({0.0, 1.0, -1.0, 2.0}, {0.0, 0.0, 5.0, 0.0}, 2, 1.5, "sqrtsoftplus", nullptr);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].first, 2);
  EXPECT_EQ(r[1].first, 3);
  EXPECT_NEAR(r[0].second, 0.4160091358481886, 1e-15);
  EXPECT_NEAR(r[1].second, 1.0839908641518115, 1e-15);
  // Hash layers take tid2eid's experts and ignore the bias.
  const int64_t row[2] = {1, 0};
  auto h = route({0.0, 1.0, -1.0, 2.0}, {0.0, 0.0, 5.0, 0.0}, 2, 1.5, "sqrtsoftplus", row);
  EXPECT_EQ(h[0].first, 1);
  EXPECT_NEAR(h[0].second, 0.868808489335217, 1e-15);
  EXPECT_NEAR(h[1].second, 0.631191510664783, 1e-15);
}

TEST(DeepseekV4Reference, CompressorPoolingHand) {
  auto mat = [](std::vector<double> v, int64_t r, int64_t c) {
    Mat m;
    m.keep = at::tensor(v, at::TensorOptions().dtype(at::kDouble)).reshape({r, c}).contiguous();
    m.p = m.keep.data_ptr<double>();
    m.rows = r;
    m.cols = c;
    return m;
  };
  // HCA, one window of 2 tokens, 2 channels. Channel 0: logits {0, ln 3} -> {1/4, 3/4} of {1, 3};
  // channel 1: logits {1, -1} of {2, 4}.
  const Mat ape = mat({0.0, 0.0, std::log(3.0), 0.0}, 2, 2);
  auto e = pool_entries({{1, 2}, {3, 4}}, {{0, 1}, {0, -1}}, ape, 2, 2, false);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NEAR(e[0][0], 2.5, 1e-15);
  EXPECT_NEAR(e[0][1], 2.238405844044235, 1e-14);
  // CSA, rate 1, one channel ([a | b] per token): entry 0 is b_0 alone; entry 1 pools a_0 (gate
  // 0) and b_1 (gate ln 3).
  auto o = pool_entries({{1, 2}, {3, 4}}, {{0, 5}, {7, std::log(3.0)}}, mat({0.0, 0.0}, 1, 2), 1, 1, true);
  ASSERT_EQ(o.size(), 2u);
  EXPECT_NEAR(o[0][0], 2.0, 1e-15);
  EXPECT_NEAR(o[1][0], 0.25 * 1 + 0.75 * 4, 1e-15);
  // Tail tokens that do not fill a window form no entry.
  EXPECT_EQ(pool_entries({{1, 2}, {3, 4}, {5, 6}}, {{0, 0}, {0, 0}, {0, 0}}, ape, 2, 2, false).size(), 1u);
}

TEST(DeepseekV4Reference, IndexerSelection) {
  const Vec scores = {0.5, 2.0, -1.0, 2.0, 9.0};  // entry 4 is in the future for n_causal 4
  EXPECT_EQ(select_entries(scores, 4, 2), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(select_entries(scores, 4, 1), (std::vector<int64_t>{1}));  // tie -> lower index
  EXPECT_EQ(select_entries(scores, 1, 2), (std::vector<int64_t>{0}));
  EXPECT_TRUE(select_entries(scores, 0, 2).empty());
  EXPECT_EQ(select_entries(scores, 9, 3), (std::vector<int64_t>{1, 3, 4}));
}

}  // namespace
}  // namespace glint
