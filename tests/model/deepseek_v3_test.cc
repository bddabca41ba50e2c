// DeepSeek-V3 against the independent float64 reference (tests/model/reference_deepseek_v3.h):
// logits for every attention and RoPE variant, gradients of the new layers by finite
// differences, and FP8 checkpoints dequantised while loading.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>

#include "io/model_files.h"
#include "io/raw_safetensors.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/decode_cache.h"
#include "model/deepseek_v3/family.h"
#include "model/deepseek_v3/attention.h"
#include "model/reference.h"
#include "model/reference_deepseek_v3.h"
#include "model/weights.h"
#include "model_util.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::kF64;

using testing::RawTensor;
using testing::write_raw_safetensors;

using nlohmann::json;

json v3_json() {
  return {{"model_type", "deepseek_v3"}, {"vocab_size", 40},       {"hidden_size", 32},
          {"intermediate_size", 40},      {"moe_intermediate_size", 12},
          {"num_hidden_layers", 3},       {"num_attention_heads", 3},
          {"n_routed_experts", 8},        {"num_experts_per_tok", 3},
          {"n_shared_experts", 2},        {"n_group", 4},
          {"topk_group", 2},              {"routed_scaling_factor", 2.5},
          {"first_k_dense_replace", 1},   {"q_lora_rank", 20},
          {"kv_lora_rank", 10},           {"qk_nope_head_dim", 8},
          {"qk_rope_head_dim", 6},        {"v_head_dim", 7},
          {"rms_norm_eps", 1e-5},         {"rope_theta", 500.0}};
}

json yarn() {
  return {{"type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 64},
          {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 0.8}};
}

using testing::logits_of;

using Variant = testing::ConfigVariant;

TEST(DeepseekV3, LogitsMatchTheNaiveReferenceInEveryVariant) {
  std::vector<Variant> variants = {
      {"low-rank q, yarn, interleaved", [](json& j) { j["rope_scaling"] = yarn(); }},
      {"plain q_proj, no scaling", [](json& j) { j["q_lora_rank"] = nullptr; }},
      {"rotate-half, v5 rope_parameters",
       [](json& j) {
         j["rope_interleave"] = false;
         json rp = yarn();
         rp.erase("type");
         rp["rope_type"] = "yarn";
         rp["rope_theta"] = 300.0;
         j["rope_parameters"] = rp;
       }},
      {"attention bias, unnormalised weights, one group",
       [](json& j) {
         j["attention_bias"] = true;
         j["norm_topk_prob"] = false;
         j["n_group"] = 1;
         j["topk_group"] = 1;
       }},
      {"tied embeddings, no shared experts, all MoE",
       [](json& j) {
         j["tie_word_embeddings"] = true;
         j["n_shared_experts"] = 0;
         j["first_k_dense_replace"] = 0;
       }},
  };
  testing::expect_variants_match_reference(
      v3_json(), variants, 10, [](const json& j, const testing::DeepseekV3Weights& w, const at::Tensor& ids) {
        return testing::deepseek_v3_reference_logits(j, w, ids);
      });
}

// An adapter whose delta is zero: the projection is unchanged, but it has an adapter.
class ZeroAdapter : public LinearAdapter {
 public:
  explicit ZeroAdapter(int64_t out) : out_(out) {}
  at::Tensor delta(const at::Tensor& x) const override {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = out_;
    return at::zeros(shape, x.options());
  }
  double kept_per_row() const override { return 0; }

 private:
  int64_t out_;
};

// Decoding caches MLA's latent and rotated key (Ckv + R values a position), counted here
// from the config, and gives the logits of the expanded keys and values, which it caches
// instead when kv_b_proj has an adapter.
TEST(DeepseekV3, DecodingCachesTheLatentUnlessKvBProjHasAnAdapter) {
  json j = v3_json();
  CausalLM m(ModelConfig::from_json(j, "test config"), kF64);
  init_weights(*m, 12);
  const int64_t rows = 2, prompt = 5, steps = 3, capacity = 12, L = j["num_hidden_layers"];
  const int64_t N = j["num_attention_heads"], Ckv = j["kv_lora_rank"], Dn = j["qk_nope_head_dim"],
                R = j["qk_rope_head_dim"], Dv = j["v_head_dim"];
  at::Tensor ids = at::randint(0, 40, {rows, prompt + steps}, at::kLong);
  auto decode = [&](int64_t* bytes) {
    at::NoGradGuard no_grad;
    DecodeCache cache(rows, c10::Device(c10::kCPU), capacity);
    std::vector<at::Tensor> logits;
    auto run = [&](int64_t from, int64_t n) {
      at::Tensor part = ids.narrow(1, from, n);
      at::Tensor pos = at::arange(from, from + n, at::kLong).expand({rows, n});
      logits.push_back(m->logits(m->forward(part, pos, at::zeros_like(part), &cache).hidden));
    };
    run(0, prompt);
    for (int64_t t = prompt; t < prompt + steps; ++t) run(t, 1);
    *bytes = cache.bytes();
    return at::cat(logits, 1);
  };
  int64_t latent_bytes = 0, expanded_bytes = 0;
  at::Tensor latent = decode(&latent_bytes);
  EXPECT_EQ(latent_bytes, L * rows * capacity * (Ckv + R) * 8);
  for (int64_t l = 0; l < L; ++l) {
    auto* attn = m->layer(l)->attention<MlaAttentionImpl>();
    attn->kv_b_proj->adapter = std::make_shared<ZeroAdapter>(attn->kv_b_proj->out_features());
  }
  at::Tensor expanded = decode(&expanded_bytes);
  EXPECT_EQ(expanded_bytes, L * rows * capacity * N * (Dn + R + Dv) * 8);
  EXPECT_LT((latent - expanded).abs().max().item<double>(), 1e-12);
}

TEST(DeepseekV3, RouterChoosesWithinTheKeptGroupsLikeTheReference) {
  json j = v3_json();
  ModelConfig c = ModelConfig::from_json(j, "test config");
  MoeBlock moe(c, kF64);
  at::manual_seed(3);
  {
    at::NoGradGuard ng;
    moe->gate->weight.copy_(at::randn(moe->gate->weight.sizes(), at::kDouble));
    // Strongly negative biases: kept experts score below zero, which a 0 mask would break.
    moe->gate->e_score_correction_bias.copy_(at::randn({8}, at::kDouble) - 3.0);
  }
  at::Tensor x = at::randn({20, c.hidden_size}, at::kDouble);
  Routing r = moe->route(x);
  for (int64_t t = 0; t < 20; ++t) {
    auto want = testing::deepseek_v3_route_ref(moe->gate->weight.detach(), moe->gate->e_score_correction_bias, x[t],
                                               c.num_experts_per_tok, c.n_group, c.topk_group, c.norm_topk_prob,
                                               c.routed_scaling_factor);
    std::map<int64_t, double> got;
    for (int64_t k = 0; k < c.num_experts_per_tok; ++k)
      got[r.experts[t][k].item<int64_t>()] = r.weights[t][k].item<double>();
    ASSERT_EQ(got.size(), want.size());
    for (auto [e, w] : want) {
      ASSERT_TRUE(got.count(e)) << "token " << t << " expert " << e;
      EXPECT_NEAR(got[e], w, 1e-12);
    }
  }
}

TEST(DeepseekV3, GradientsOfAttentionRouterAndSharedExpertsMatchFiniteDifferences) {
  json j = v3_json();
  j["rope_scaling"] = yarn();
  CausalLM m(ModelConfig::from_json(j, "test config"), kF64);
  testing::randomize_around_init(*m, 5);
  at::Tensor ids = at::randint(0, 40, {2, 6}, at::kLong);
  at::Tensor probe = at::randn({2, 6, 40}, at::kDouble);
  auto f = [&] { return (logits_of(*m, ids) * probe).sum(); };
  DecoderLayer moe_layer = m->layer(1);
  MlaAttentionImpl* attn = moe_layer->attention<MlaAttentionImpl>();
  ASSERT_NE(attn, nullptr);
  for (auto* p : {&attn->q_a_proj->weight, &attn->q_a_layernorm->weight, &attn->q_b_proj->weight,
                  &attn->kv_a_proj_with_mqa->weight, &attn->kv_a_layernorm->weight, &attn->kv_b_proj->weight,
                  &attn->o_proj->weight, &moe_layer->moe->gate->weight,
                  &moe_layer->moe->shared_experts->down_proj->weight, &moe_layer->moe->experts->gate_up_proj}) {
    p->set_requires_grad(true);
    EXPECT_LT(testing::fd_check(f, *p), 1e-6);
    p->set_requires_grad(false);
  }
}

// --- FP8 checkpoints -------------------------------------------------------------

// E4M3 decoded from its bits: sign, 4 exponent bits (bias 7), 3 mantissa bits.
double e4m3(uint8_t code) {
  int sign = code >> 7, e = (code >> 3) & 15, mant = code & 7;
  double v = e == 0 ? mant / 8.0 * std::ldexp(1.0, -6) : (1 + mant / 8.0) * std::ldexp(1.0, e - 7);
  return sign ? -v : v;
}

// A model whose projections are stored as FP8 e4m3 codes with float32 128x128 block
// scales (hidden 136: blocks that end mid-tensor in both dimensions), the same model
// stored in float64 with the values dequantised by hand, and both directories.
struct Fp8Pair {
  std::string fp8_dir, plain_dir;
  std::vector<std::string> fp8_keys;
};

Fp8Pair write_fp8_pair(const std::string& root, const std::function<void(std::vector<RawTensor>&)>& corrupt = {}) {
  json j = v3_json();
  j["hidden_size"] = 136;
  j["moe_intermediate_size"] = 130;
  CausalLM m(ModelConfig::from_json(j, "test config"), kF64);
  testing::randomize_around_init(*m, 9);
  Fp8Pair out{root + "/fp8", root + "/plain", {}};
  std::filesystem::create_directories(out.fp8_dir);
  std::filesystem::create_directories(out.plain_dir);
  std::vector<RawTensor> raw;
  std::vector<std::pair<std::string, at::Tensor>> plain;
  at::manual_seed(17);
  for (auto& [key, t] : hub_state_dict(*m)) {
    bool quantised = t.dim() == 2 && key.find("embed") == std::string::npos && key.find("lm_head") == std::string::npos &&
                     key.find("mlp.gate.weight") == std::string::npos;
    if (!quantised) {
      raw.push_back({key, "F64", t.contiguous()});
      plain.emplace_back(key, t);
      continue;
    }
    const int64_t R = t.size(0), C = t.size(1);
    at::Tensor codes = at::randint(0, 256, {R, C}, at::kInt).to(at::kByte);
    codes.masked_fill_(codes.eq(0x7F) | codes.eq(0xFF), 0);  // no NaN codes
    at::Tensor scale = at::rand({(R + 127) / 128, (C + 127) / 128}, at::kFloat) + 0.25;
    // Each code's value from its bits, times its block's scale.
    std::vector<double> table(256);
    for (int v = 0; v < 256; ++v) table[v] = e4m3(uint8_t(v));
    at::Tensor rows = at::arange(R, at::kLong).div(128, "floor"), cols = at::arange(C, at::kLong).div(128, "floor");
    at::Tensor block_scale = scale.to(at::kDouble).index_select(0, rows).index_select(1, cols);  // [R, C]
    at::Tensor value = at::tensor(table, at::kDouble).index_select(0, codes.to(at::kLong).reshape({-1})).view({R, C}) *
                       block_scale;
    raw.push_back({key, "F8_E4M3", codes});
    raw.push_back({key + "_scale_inv", "F32", scale});
    plain.emplace_back(key, value);
    out.fp8_keys.push_back(key);
  }
  if (corrupt) corrupt(raw);
  json cfg = m->config.to_json();
  cfg["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}};
  std::ofstream(out.fp8_dir + "/config.json") << cfg.dump();
  std::ofstream(out.plain_dir + "/config.json") << m->config.to_json().dump();
  write_raw_safetensors(out.fp8_dir + "/model.safetensors", raw);
  write_checkpoint(out.plain_dir, plain);
  return out;
}

TEST(DeepseekV3, Fp8CheckpointLoadsToTheHandDequantisedWeights) {
  Fp8Pair d = write_fp8_pair(testing::fresh_temp_dir("dsv3_fp8"));
  ASSERT_GT(d.fp8_keys.size(), 10u);
  CausalLM fp8 = from_pretrained(d.fp8_dir, kF64), plain = from_pretrained(d.plain_dir, kF64);
  auto a = fp8->named_parameters(), b = plain->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i].value(), b[i].value())) << a[i].key();
  // Ranges of the flattened parameters (what an FSDP rank reads), starting and ending
  // mid-row and mid-block, from both the per-expert FP8 keys and the plain ones.
  CheckpointReader ckpt(d.fp8_dir);
  for (const auto& site : parameter_sites(*plain)) {
    const int64_t n = site.tensor.numel();
    for (auto [start, count] : std::vector<std::pair<int64_t, int64_t>>{{0, n}, {n / 3 + 1, n / 3}, {n - 5, 5}}) {
      at::Tensor got = read_parameter_range(ckpt, site, site.tensor.sizes(), start, count, at::kDouble);
      EXPECT_TRUE(at::equal(got, site.tensor.detach().reshape({-1}).narrow(0, start, count)))
          << site.name << " [" << start << ", +" << count << ")";
    }
  }
}

TEST(DeepseekV3, Fp8CheckpointWithABadOrMissingScaleIsAClearError) {
  const std::string key = "model.layers.1.self_attn.kv_b_proj.weight";
  auto expect_error = [&](const std::string& name, const std::function<void(std::vector<RawTensor>&)>& corrupt,
                          const std::string& needle) {
    Fp8Pair d = write_fp8_pair(testing::fresh_temp_dir(name), corrupt);
    testing::expect_error_naming([&] { from_pretrained(d.fp8_dir, kF64); }, needle);
  };
  expect_error("dsv3_nan_scale", [&](std::vector<RawTensor>& raw) {
    for (auto& r : raw) if (r.name == key + "_scale_inv") r.t = r.t.clone().fill_(std::nanf(""));
  }, key);
  expect_error("dsv3_zero_scale", [&](std::vector<RawTensor>& raw) {
    for (auto& r : raw) if (r.name == key + "_scale_inv") r.t = r.t.clone().fill_(0.0f);
  }, key);
  expect_error("dsv3_no_scale", [&](std::vector<RawTensor>& raw) {
    raw.erase(std::remove_if(raw.begin(), raw.end(), [&](const RawTensor& r) { return r.name == key + "_scale_inv"; }),
              raw.end());
  }, key + "_scale_inv");
  expect_error("dsv3_short_scale", [&](std::vector<RawTensor>& raw) {
    for (auto& r : raw) if (r.name == key + "_scale_inv") r.t = at::ones({1}, at::kFloat);
  }, key);
}

// The release stores its multi-token-prediction layer after the decoder's
// (model.layers.61.* with 61 layers): loading skips it; other unknown keys stay errors.
TEST(DeepseekV3, TheMultiTokenPredictionLayerIsSkippedWhenLoading) {
  CausalLM m(ModelConfig::from_json(v3_json(), "test config"), kF64);
  testing::randomize_around_init(*m, 4);
  testing::expect_skipped_when_loading(*m, testing::fresh_temp_dir("deepseek_v3_mtp"),
                                       {"model.layers.3.eh_proj.weight", "model.layers.3.enorm.weight",
                                        "model.layers.3.shared_head.head.weight",
                                        "model.layers.3.mlp.experts.0.up_proj.weight"});
}

TEST(DeepseekV3, ConfigErrorsNameTheField) {
  auto bad = [](const std::function<void(json&)>& edit, const std::string& needle) {
    json j = v3_json();
    edit(j);
    testing::expect_error_naming([&] { ModelConfig::from_json(j, "cfg.json"); }, needle);
  };
  bad([](json& j) { j["n_group"] = 3; }, "n_group");
  bad([](json& j) { j["topk_group"] = 5; }, "topk_group");
  bad([](json& j) { j["scoring_func"] = "softmax"; }, "scoring_func");
  bad([](json& j) { j["kv_lora_rank"] = "big"; }, "kv_lora_rank");
  bad([](json& j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; }, "linear");
  bad([](json& j) { j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}}; },
      "weight_block_size");
  bad([](json& j) { j["qk_rope_head_dim"] = 5; }, "qk_rope_head_dim");
}

}  // namespace
}  // namespace glint

namespace glint {
namespace {

TEST(DeepseekV3, AuxLossFreeBalancingMovesBiasesTowardBalancedLoad) {
  CausalLM m(ModelConfig::from_json(v3_json(), "test config"), kF64);
  // Two MoE layers (1 and 2), 8 experts: mean load 4 in each.
  at::Tensor load = at::tensor({0, 4, 8, 4, 1, 7, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}, at::kLong).view({2, 8});
  update_router_biases(*m, load, 0.01);
  update_router_biases(*m, load, 0.01);
  at::Tensor want = at::tensor(std::vector<double>{0.02, 0, -0.02, 0, 0.02, -0.02, 0, 0}, at::kDouble);
  EXPECT_TRUE(at::allclose(m->layer(1)->moe->gate->e_score_correction_bias, want, 0, 1e-15));
  EXPECT_TRUE(at::equal(m->layer(2)->moe->gate->e_score_correction_bias, at::zeros({8}, at::kDouble)));
  auto biases = router_biases(*m);
  ASSERT_EQ(biases.size(), 2u);
  EXPECT_EQ(biases[0].first, "model.layers.1.mlp.gate.e_score_correction_bias");
}

TEST(DeepseekV3, TrainingWithBiasUpdatesSavesTheBiases) {
  std::string d = testing::fresh_temp_dir("dsv3_bias");
  std::ofstream(d + "/config.json") << deepseek_v3_family().tiny(64).to_json().dump();
  auto r = testing::run_glint("init-model --config " + d + "/config.json --output " + d + "/model");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_glint("train --model " + d + "/model --steps 3 --batch-size 2 --seq-len 16 --lora-r 2 "
                         "--router-bias-update-rate 0.01 --output " + d + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  SafetensorsFile f(d + "/run/adapter/router_biases.safetensors");
  ASSERT_EQ(f.keys(), std::vector<std::string>{"model.layers.1.mlp.gate.e_score_correction_bias"});
  at::Tensor b = f.read(f.keys()[0]).to(at::kDouble);
  // Three steps of +-0.01 (or 0) from zero.
  EXPECT_GT(b.abs().max().item<double>(), 0.0);
  EXPECT_TRUE(at::allclose(b * 100, (b * 100).round(), 0, 1e-5)) << b;
  EXPECT_LE(b.abs().max().item<double>(), 0.03 + 1e-6);
  // The softmax load-balancing loss is refused for a sigmoid router.
  r = testing::run_glint("train --model " + d + "/model --steps 1 --router-aux-loss-coef 0.01 --output " + d + "/aux");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--router-bias-update-rate"), std::string::npos) << r.output;
  // A family without correction biases refuses the flag.
  r = testing::run_glint("train --router-bias-update-rate 0.01 --steps 1 --output " + d + "/qwen");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--router-bias-update-rate"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace glint
