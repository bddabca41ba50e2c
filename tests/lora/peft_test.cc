// PEFT adapter files: key names, expert layouts (checked against tensors built here by
// explicit index loops), adapter_config.json, save -> load round trip, bad adapters.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/safetensors.h"
#include "lora/peft_io.h"
#include "model/causal_lm.h"
#include "model/family.h"

#include "lora_test_util.h"
#include "model_util.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::lora_test_config;

using glint::testing::kF32;

namespace fs = std::filesystem;

std::string peft_dir(const std::string& name) { return glint::testing::fresh_temp_dir("peft_" + name); }


LoraModel randomized_lora(CausalLMImpl& m, LoraOptions o) {
  LoraModel lora = apply_lora(m, o, 5);
  at::NoGradGuard ng;
  for (auto& s : lora.sites) s.B().copy_(at::randn(s.B().sizes()));
  return lora;
}

TEST(Peft, ExpertLayoutMatchesIndexLoopsAndPeftDelta) {
  const int64_t E = 3, r = 2, in = 4, out = 5;
  at::Tensor A = at::randn({E, r, in}), B = at::randn({E, out, r});
  at::Tensor pa = expert_A_to_peft(A), pb = expert_B_to_peft(B);
  ASSERT_EQ(pa.sizes(), (std::vector<int64_t>{E * r, in}));
  ASSERT_EQ(pb.sizes(), (std::vector<int64_t>{out, r * E}));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = 0; j < r; ++j) {
      EXPECT_TRUE(at::equal(pa[e * r + j], A[e][j]));
      for (int64_t o = 0; o < out; ++o) EXPECT_EQ(pb[o][j * E + e].item<float>(), B[e][o][j].item<float>());
    }
  // PEFT's delta for [E, out, in] parameters: A -> (E, r, in), B -> (out, r, E),
  // einsum "o r e, e r i -> e o i"; it must equal B_e A_e for every expert.
  at::Tensor A3 = pa.reshape({E, r, in}), B3 = pb.reshape({out, r, E});
  for (int64_t e = 0; e < E; ++e) {
    at::Tensor delta = at::zeros({out, in});
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i)
        for (int64_t j = 0; j < r; ++j) delta[o][i] += B3[o][j][e] * A3[e][j][i];
    EXPECT_TRUE(at::allclose(delta, at::mm(B[e], A[e]), 1e-5, 1e-6)) << "expert " << e;
  }
  // Naively concatenating per-expert [out, r] blocks is a different order when r > 1.
  EXPECT_FALSE(at::equal(pb, at::cat(B.unbind(0), 1)));
  EXPECT_TRUE(at::equal(expert_A_from_peft(pa, E), A));
  EXPECT_TRUE(at::equal(expert_B_from_peft(pb, E), B));
}

TEST(Peft, KeyNamesAndShapes) {
  CausalLM m(lora_test_config(), kF32);
  init_weights(*m, 1);
  LoraOptions o;
  o.r = 2;
  LoraModel lora = apply_lora(*m, o, 1);
  std::map<std::string, std::vector<int64_t>> keys;
  for (auto& [k, t] : peft_state_dict(lora)) keys[k] = t.sizes().vec();
  const std::string L0 = "base_model.model.model.layers.0.";
  EXPECT_EQ(keys.at(L0 + "self_attn.q_proj.lora_A.weight"), (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(keys.at(L0 + "self_attn.q_proj.lora_B.weight"), (std::vector<int64_t>{8, 2}));
  EXPECT_EQ(keys.at(L0 + "self_attn.k_proj.lora_B.weight"), (std::vector<int64_t>{4, 2}));
  // Both expert targets: gate_up_proj is the inner (base_layer) wrapper.
  EXPECT_EQ(keys.at(L0 + "mlp.experts.base_layer.lora_A.weight"), (std::vector<int64_t>{3 * 2, 8}));
  EXPECT_EQ(keys.at(L0 + "mlp.experts.base_layer.lora_B.weight"), (std::vector<int64_t>{10, 2 * 3}));
  EXPECT_EQ(keys.at(L0 + "mlp.experts.lora_A.weight"), (std::vector<int64_t>{3 * 2, 5}));
  EXPECT_EQ(keys.at(L0 + "mlp.experts.lora_B.weight"), (std::vector<int64_t>{8, 2 * 3}));
  EXPECT_EQ(keys.at("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"), (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(keys.size(), 2u * (4 + 2 + 4 + 3));
  // Only down_proj targeted: it sits at the module path itself.
  CausalLM m2(lora_test_config(), kF32);
  LoraOptions only;
  LoraOptions::parse_targets("experts.down_proj", "test", &only);
  only.r = 2;
  LoraModel l2 = apply_lora(*m2, only, 1);
  auto sd = peft_state_dict(l2);
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, L0 + "mlp.experts.lora_A.weight");
  EXPECT_EQ(sd[0].second.sizes(), (std::vector<int64_t>{6, 5}));
}

TEST(Peft, SaveLoadRoundTripIsExact) {
  ModelConfig c = lora_test_config();
  CausalLM m(c, kF32);
  init_weights(*m, 2);
  LoraOptions o;
  o.r = 3;
  o.alpha = 7;
  o.use_rslora = true;
  LoraModel lora = randomized_lora(*m, o);
  std::string d = peft_dir("roundtrip");
  save_adapter(d, lora, "some/base-model");
  auto cfg = nlohmann::json::parse(std::ifstream(d + "/adapter_config.json"));
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["task_type"], "CAUSAL_LM");
  EXPECT_EQ(cfg["r"], 3);
  EXPECT_EQ(cfg["lora_alpha"], 7.0);
  EXPECT_EQ(cfg["use_rslora"], true);
  EXPECT_EQ(cfg["base_model_name_or_path"], "some/base-model");
  EXPECT_EQ(cfg["target_modules"],
            nlohmann::json({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
  EXPECT_EQ(cfg["target_parameters"], nlohmann::json({"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}));

  CausalLM fresh(c, kF32);
  init_weights(*fresh, 2);
  LoraModel loaded = load_adapter(d, *fresh);
  glint::testing::expect_same_adapters(lora, loaded);
  EXPECT_DOUBLE_EQ(loaded.options.scale(), 7.0 / std::sqrt(3.0));
  EXPECT_TRUE(at::equal(glint::testing::logits_of(*m), glint::testing::logits_of(*fresh)));
}

// Router biases moved by balancing travel with the adapter: load_adapter puts them back
// over the base model's, and a file with a wrong key or shape is refused by name.
TEST(Peft, RouterBiasesBesideTheAdapterAreLoaded) {
  ModelConfig c = family_for("deepseek_v3", "test").tiny(64);
  CausalLM trained(c, kF32);
  init_weights(*trained, 2);
  LoraOptions o;
  o.r = 2;
  o.alpha = 4;
  LoraModel lora = randomized_lora(*trained, o);
  std::vector<std::pair<std::string, at::Tensor>> biases = router_biases(*trained);
  ASSERT_FALSE(biases.empty());
  {
    at::NoGradGuard ng;
    for (auto& [name, b] : biases) b.copy_(at::randn(b.sizes()));
  }
  std::string d = peft_dir("router_biases");
  save_adapter(d, lora, "base");
  write_safetensors(d + "/" + kRouterBiasesFile, biases);

  CausalLM fresh(c, kF32);
  init_weights(*fresh, 2);
  std::vector<std::pair<std::string, at::Tensor>> before = router_biases(*fresh);
  EXPECT_FALSE(at::equal(before[0].second, biases[0].second));
  LoraModel loaded = load_adapter(d, *fresh);
  std::vector<std::pair<std::string, at::Tensor>> after = router_biases(*fresh);
  ASSERT_EQ(after.size(), biases.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(at::equal(after[i].second, biases[i].second)) << after[i].first;
  EXPECT_TRUE(at::equal(glint::testing::logits_of(*trained), glint::testing::logits_of(*fresh)));

  std::vector<std::pair<std::string, at::Tensor>> wrong = biases;
  wrong[0].second = at::zeros({wrong[0].second.size(0) + 1});
  write_safetensors(d + "/" + kRouterBiasesFile, wrong);
  CausalLM third(c, kF32);
  for (std::string word : {std::string(kRouterBiasesFile), wrong[0].first, std::string("shape")})
    glint::testing::expect_error_naming([&] { load_adapter(d, *third); }, word);
}

// Under expert parallelism a rank holds experts [first, first + n); loading the (whole)
// adapter gives it exactly those experts' A and B.
TEST(Peft, LoadingOntoAnExpertSliceTakesItsExperts) {
  ModelConfig c = lora_test_config();
  CausalLM m(c, kF32);
  init_weights(*m, 2);
  LoraOptions o;
  o.r = 2;
  LoraModel lora = randomized_lora(*m, o);
  std::string d = peft_dir("slice");
  save_adapter(d, lora, "base");
  CausalLM part(c, kF32);
  init_weights(*part, 2);
  const int64_t first = 1, n = 2;
  {
    at::NoGradGuard ng;
    ExpertsImpl& ex = *part->layer(0)->moe->experts;
    ex.gate_up_proj.set_(ex.gate_up_proj.narrow(0, first, n).clone());
    ex.down_proj.set_(ex.down_proj.narrow(0, first, n).clone());
    ex.first_expert = first;
  }
  LoraModel loaded = load_adapter(d, *part);
  auto want = lora.named_parameters(), got = loaded.named_parameters();
  ASSERT_EQ(want.size(), got.size());
  int expert_tensors = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].first, got[i].first);
    bool expert = want[i].first.find(".mlp.experts.") != std::string::npos;
    expert_tensors += expert;
    at::Tensor expected = expert ? want[i].second.narrow(0, first, n) : want[i].second;
    EXPECT_TRUE(at::equal(expected, got[i].second)) << want[i].first;
  }
  EXPECT_EQ(expert_tensors, 4);
}

TEST(Peft, BadAdaptersAreErrors) {
  ModelConfig c = lora_test_config();
  CausalLM m(c, kF32);
  LoraOptions o;
  o.r = 2;
  LoraModel lora = randomized_lora(*m, o);
  std::string d = peft_dir("bad");
  save_adapter(d, lora, "base");
  std::string st = d + "/adapter_model.safetensors";
  auto expect = [&](const std::string& word) {
    CausalLM fresh(c, kF32);
    try {
      load_adapter(d, *fresh);
      ADD_FAILURE() << word;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  auto sd = peft_state_dict(lora);
  std::string dropped = sd.back().first;
  sd.pop_back();
  write_safetensors(st, sd);
  expect("missing key '" + dropped + "'");
  sd = peft_state_dict(lora);
  sd.emplace_back("base_model.model.lm_head.lora_A.weight", at::zeros({2, 8}));
  write_safetensors(st, sd);
  expect("unexpected key 'base_model.model.lm_head.lora_A.weight'");
  sd = peft_state_dict(lora);
  sd[0].second = at::zeros({3, 3});
  write_safetensors(st, sd);
  expect(sd[0].first);
  std::ofstream(d + "/adapter_config.json") << R"({"peft_type":"IA3","r":2,"lora_alpha":4,"target_modules":["q_proj"]})";
  expect("peft_type");
}

}  // namespace
}  // namespace glint

namespace glint {
namespace {

TEST(Peft, LoadingOntoAModelWithAdaptersIsAnError) {
  CausalLM m(lora_test_config(), kF32);
  LoraModel first = apply_lora(*m, LoraOptions{}, 1);
  std::string d = peft_dir("twice");
  save_adapter(d, first, "base");
  EXPECT_TRUE(has_adapters(*m));
  EXPECT_THROW(load_adapter(d, *m), Error);
  first.detach_from(*m);
  EXPECT_FALSE(has_adapters(*m));
  EXPECT_NO_THROW(load_adapter(d, *m));
}

// Found by tests/fuzz/adapter_fuzz.cc: a weights file that did not fit was refused after
// the adapters had been attached, so the model kept them (and its parameters stayed
// frozen); the next load_adapter then failed with "already has adapters".
TEST(Peft, ARefusedAdapterLeavesTheModelAsItWas) {
  ModelConfig c = lora_test_config();
  CausalLM m(c, kF32);
  LoraOptions o;
  o.r = 2;
  LoraModel lora = randomized_lora(*m, o);
  std::string d = peft_dir("refused");
  save_adapter(d, lora, "base");
  auto sd = peft_state_dict(lora);
  at::Tensor good = sd.back().second;
  sd.back().second = at::zeros({good.size(0) + 1, good.size(1)});
  write_safetensors(d + "/adapter_model.safetensors", sd);

  CausalLM fresh(c, kF32);
  for (const auto& p : fresh->parameters()) ASSERT_TRUE(p.requires_grad());
  glint::testing::expect_error_naming([&] { load_adapter(d, *fresh); }, sd.back().first);
  EXPECT_FALSE(has_adapters(*fresh));
  for (const auto& p : fresh->parameters()) EXPECT_TRUE(p.requires_grad());
  sd.back().second = good;
  write_safetensors(d + "/adapter_model.safetensors", sd);
  LoraModel loaded = load_adapter(d, *fresh);
  glint::testing::expect_same_adapters(lora, loaded);
}

}  // namespace
}  // namespace glint
