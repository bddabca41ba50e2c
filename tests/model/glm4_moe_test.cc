// GLM-4.5/4.6 against the independent float64 reference (tests/model/reference_glm4_moe.h):
// logits and the step-1 loss in every variant of its attention and router, gradients of
// its own pieces (q/k/v biases, q/k norms, partial RoPE) by finite differences, the
// released config read, the multi-token-prediction layer skipped while loading.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "io/model_files.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/glm4_moe/attention.h"
#include "model/glm4_moe/config.h"
#include "model/reference.h"
#include "model/reference_glm4_moe.h"
#include "model/weights.h"
#include "model_util.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::kF64;
using nlohmann::json;

// Three layers (one dense, two MoE), GQA 4:2, q/k norms, half the head rotated, 8 experts
// in 4 groups, two shared experts.
json glm_json() {
  return {{"model_type", "glm4_moe"},     {"vocab_size", 40},       {"hidden_size", 32},
          {"intermediate_size", 40},      {"moe_intermediate_size", 12},
          {"num_hidden_layers", 3},       {"num_attention_heads", 4},
          {"num_key_value_heads", 2},     {"head_dim", 16},
          {"partial_rotary_factor", 0.5}, {"attention_bias", true},
          {"use_qk_norm", true},          {"n_routed_experts", 8},
          {"num_experts_per_tok", 3},     {"n_shared_experts", 2},
          {"n_group", 4},                 {"topk_group", 2},
          {"routed_scaling_factor", 2.5}, {"first_k_dense_replace", 1},
          {"rms_norm_eps", 1e-5},         {"rope_theta", 500.0}};
}

using testing::logits_of;

using Variant = testing::ConfigVariant;

TEST(Glm4Moe, LogitsAndStepOneLossMatchTheNaiveReferenceInEveryVariant) {
  std::vector<Variant> variants = {
      {"q/k norms, biases, half rotated, groups", [](json&) {}},
      {"GLM-4.5-Air's attention: no q/k norm, one group", [](json& j) {
         j["use_qk_norm"] = false;
         j["n_group"] = 1;
         j["topk_group"] = 1;
         j["routed_scaling_factor"] = 1.0;
       }},
      {"a quarter rotated, v5 rope_parameters", [](json& j) {
         j.erase("partial_rotary_factor");
         j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 300.0}, {"partial_rotary_factor", 0.25}};
       }},
      {"fully rotated, no bias, unnormalised weights", [](json& j) {
         j["partial_rotary_factor"] = 1.0;
         j["attention_bias"] = false;
         j["norm_topk_prob"] = false;
       }},
      {"tied embeddings, no shared experts, all MoE, default head_dim", [](json& j) {
         j["tie_word_embeddings"] = true;
         j["n_shared_experts"] = 0;
         j["first_k_dense_replace"] = 0;
         j.erase("head_dim");  // 32 / 4 = 8
       }},
  };
  testing::expect_variants_match_reference(glm_json(), variants, 20, testing::glm4_moe_reference_logits);
}

TEST(Glm4Moe, GradientsOfBiasesNormsPartialRopeAndRouterMatchFiniteDifferences) {
  CausalLM m(ModelConfig::from_json(glm_json(), "test config"), kF64);
  testing::randomize_around_init(*m, 5);
  at::Tensor ids = at::randint(0, 40, {2, 6}, at::kLong);
  at::Tensor probe = at::randn({2, 6, 40}, at::kDouble);
  auto f = [&] { return (logits_of(*m, ids) * probe).sum(); };
  DecoderLayer moe_layer = m->layer(1);
  Glm4MoeAttentionImpl* attn = moe_layer->attention<Glm4MoeAttentionImpl>();
  ASSERT_NE(attn, nullptr);
  ASSERT_TRUE(attn->q_norm && attn->q_proj->bias.defined());
  const std::vector<std::pair<const char*, at::Tensor*>> pieces = {
      {"q_proj.weight", &attn->q_proj->weight}, {"q_proj.bias", &attn->q_proj->bias},
      {"k_proj.weight", &attn->k_proj->weight}, {"k_proj.bias", &attn->k_proj->bias},
      {"v_proj.bias", &attn->v_proj->bias},     {"q_norm.weight", &attn->q_norm->weight},
      {"k_norm.weight", &attn->k_norm->weight}, {"o_proj.weight", &attn->o_proj->weight},
      {"gate.weight", &moe_layer->moe->gate->weight},
      {"shared_experts.down_proj.weight", &moe_layer->moe->shared_experts->down_proj->weight},
      {"experts.gate_up_proj", &moe_layer->moe->experts->gate_up_proj}};
  // Central differences at eps 1e-4: at 1e-6 the experts' smallest gradient entries sit
  // at float64's round-off of f, and at 1e-5 that round-off reached 1.6e-6 relative; the
  // central difference's own error is O(eps^2) ~ 1e-8.
  for (const auto& [name, p] : pieces) {
    p->set_requires_grad(true);
    EXPECT_LT(testing::fd_check(f, *p, 12, /*eps=*/1e-4), 1e-6) << name;
    p->set_requires_grad(false);
  }
}

// GLM-4.5-Air's released config.json (zai-org/GLM-4.5-Air), as transformers reads it.
TEST(Glm4Moe, TheReleasedConfigReads) {
  json j = {{"architectures", {"Glm4MoeForCausalLM"}},
            {"attention_bias", true},
            {"attention_dropout", 0.0},
            {"pad_token_id", 151329},
            {"eos_token_id", {151329, 151336, 151338}},
            {"head_dim", 128},
            {"hidden_act", "silu"},
            {"hidden_size", 4096},
            {"partial_rotary_factor", 0.5},
            {"initializer_range", 0.02},
            {"intermediate_size", 10944},
            {"max_position_embeddings", 131072},
            {"model_type", "glm4_moe"},
            {"moe_intermediate_size", 1408},
            {"norm_topk_prob", true},
            {"num_attention_heads", 96},
            {"n_group", 1},
            {"topk_group", 1},
            {"n_routed_experts", 128},
            {"n_shared_experts", 1},
            {"routed_scaling_factor", 1.0},
            {"num_experts_per_tok", 8},
            {"first_k_dense_replace", 1},
            {"num_hidden_layers", 46},
            {"num_key_value_heads", 8},
            {"rms_norm_eps", 1e-05},
            {"rope_scaling", nullptr},
            {"rope_theta", 1000000},
            {"num_nextn_predict_layers", 1},
            {"tie_word_embeddings", false},
            {"torch_dtype", "bfloat16"},
            {"use_cache", true},
            {"use_qk_norm", false},
            {"vocab_size", 151552}};
  ModelConfig c = ModelConfig::from_json(j, "GLM-4.5-Air config.json");
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.5);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(glm(c).use_qk_norm);
  EXPECT_EQ(glm(c).num_nextn_predict_layers, 1);
  EXPECT_EQ(c.scoring_func, "sigmoid");
  EXPECT_TRUE(c.router_correction_bias);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_TRUE(c.is_moe_layer(45));
  EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{151329, 151336, 151338}));
  // Written back and read again, the same config.
  EXPECT_EQ(ModelConfig::from_json(c.to_json(), "written").to_json(), c.to_json());
}

// A release stores its multi-token-prediction layer after the decoder's: model.layers.N.*
// for N = num_hidden_layers (embedding and head projections, norms, a decoder layer). It
// is not part of the model and loading skips it; other unknown keys stay errors.
TEST(Glm4Moe, TheMultiTokenPredictionLayerIsSkippedWhenLoading) {
  json j = glm_json();
  j["num_nextn_predict_layers"] = 1;
  CausalLM m(ModelConfig::from_json(j, "test config"), kF64);
  testing::randomize_around_init(*m, 3);
  std::vector<std::string> mtp;
  for (const char* k : {"eh_proj.weight", "enorm.weight", "hnorm.weight", "shared_head.norm.weight",
                        "self_attn.q_proj.weight", "mlp.experts.0.gate_proj.weight"})
    mtp.push_back(std::string("model.layers.3.") + k);
  testing::expect_skipped_when_loading(*m, testing::fresh_temp_dir("glm4_moe_mtp"), mtp);
}

TEST(Glm4Moe, ConfigErrorsNameTheField) {
  auto bad = [](const std::function<void(json&)>& edit, const std::string& needle) {
    json j = glm_json();
    edit(j);
    testing::expect_error_naming([&] { ModelConfig::from_json(j, "cfg.json"); }, needle);
  };
  bad([](json& j) { j["n_group"] = 3; }, "n_group");
  bad([](json& j) { j["topk_group"] = 5; }, "topk_group");
  bad([](json& j) { j["partial_rotary_factor"] = 0.1; }, "partial_rotary_factor");
  bad([](json& j) { j["use_qk_norm"] = "yes"; }, "use_qk_norm");
  bad([](json& j) { j["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}}; }, "yarn");
  bad([](json& j) { j["num_key_value_heads"] = 3; }, "num_key_value_heads");
  bad([](json& j) { j["head_dim"] = 0; }, "head_dim");
}

}  // namespace
}  // namespace glint
