// Checkpoint loading (per-expert Hub form and packed form), export, config.json checks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/weights.h"

#include "test_util.h"

namespace glint {
namespace {

namespace fs = std::filesystem;

const TensorPlacement kF32{at::kFloat, c10::Device(c10::kCPU)};

std::string temp_dir(const std::string& name) { return glint::testing::fresh_temp_dir("weights_" + name); }

ModelConfig config() {
  ModelConfig c = tiny_moe_config(23);
  c.hidden_size = 16;
  c.moe_intermediate_size = 6;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.num_experts = 4;
  return c;
}

void expect_same_params(CausalLMImpl& a, CausalLMImpl& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) EXPECT_TRUE(at::equal(item.value(), pb[item.key()])) << item.key();
}

void expect_error_naming(const std::function<void()>& f, const std::string& word) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming " << word;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

TEST(Weights, HubAndPackedFormsLoadToIdenticalTensors) {
  ModelConfig c = config();
  CausalLM src(c, kF32);
  init_weights(*src, 11);
  // Per-expert Hub form, as save_pretrained writes it.
  std::string hub = temp_dir("hub");
  save_pretrained(*src, hub);
  CheckpointReader hr(hub);
  EXPECT_TRUE(hr.contains("model.layers.0.mlp.experts.3.up_proj.weight"));
  EXPECT_FALSE(hr.contains("model.layers.0.mlp.experts.gate_up_proj"));
  // Packed form built here by stacking the per-expert tensors read back from disk.
  std::vector<std::pair<std::string, at::Tensor>> packed;
  for (const auto& key : hr.keys())
    if (key.find(".mlp.experts.") == std::string::npos) packed.emplace_back(key, hr.read(key));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::vector<at::Tensor> gu, dn;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      std::string p = "model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + ".";
      gu.push_back(at::cat({hr.read(p + "gate_proj.weight"), hr.read(p + "up_proj.weight")}, 0));
      dn.push_back(hr.read(p + "down_proj.weight"));
    }
    std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    packed.emplace_back(p + "gate_up_proj", at::stack(gu));  // [E, 2I, H]
    packed.emplace_back(p + "down_proj", at::stack(dn));     // [E, H, I]
  }
  std::string pk = temp_dir("packed");
  write_checkpoint(pk, packed, /*max_shard_bytes=*/4000);  // sharded, with an index
  EXPECT_TRUE(fs::exists(pk + "/model.safetensors.index.json"));
  CausalLM a(c, kF32), b(c, kF32);
  load_weights(*a, hr);
  load_weights(*b, CheckpointReader(pk));
  expect_same_params(*a, *b);
  expect_same_params(*a, *src);
  // The expert slice: gate rows first, then up.
  at::Tensor g = hr.read("model.layers.1.mlp.experts.2.gate_proj.weight");
  EXPECT_TRUE(at::equal(a->layer(1)->moe->experts->gate_up_proj[2].narrow(0, 0, 6), g));
}

TEST(Weights, Bf16CheckpointLoadsIntoFloat32) {
  ModelConfig c = config();
  CausalLM src(c, TensorPlacement{at::kBFloat16, c10::Device(c10::kCPU)});
  init_weights(*src, 3);
  std::string d = temp_dir("bf16");
  save_pretrained(*src, d);
  EXPECT_EQ(CheckpointReader(d).info("model.norm.weight").dtype, at::kBFloat16);
  CausalLM dst = from_pretrained(d, kF32);
  EXPECT_TRUE(at::equal(dst->model->embed_tokens_weight, src->model->embed_tokens_weight.to(at::kFloat)));
}

TEST(Weights, MissingWrongShapeAndUnexpectedKeysAreErrors) {
  ModelConfig c = config();
  CausalLM src(c, kF32);
  init_weights(*src, 1);
  auto sd = hub_state_dict(*src);
  auto write_and_load = [&](std::vector<std::pair<std::string, at::Tensor>> tensors) {
    std::string d = temp_dir("bad");
    write_checkpoint(d, tensors);
    CausalLM m(c, kF32);
    load_weights(*m, CheckpointReader(d));
  };
  auto without = sd;
  without.erase(without.begin() + 3);
  std::string missing = sd[3].first;
  expect_error_naming([&] { write_and_load(without); }, missing);
  auto reshaped = sd;
  reshaped[0].second = at::zeros({2, 2});
  expect_error_naming([&] { write_and_load(reshaped); }, "expected [23, 16]");
  auto extra = sd;
  extra.emplace_back("model.layers.0.mlp.shared_expert.weight", at::zeros({1}));
  expect_error_naming([&] { write_and_load(extra); }, "unexpected key 'model.layers.0.mlp.shared_expert.weight'");
}

TEST(Weights, ConfigJsonErrorsNameTheField) {
  nlohmann::json good = config().to_json();
  EXPECT_NO_THROW(ModelConfig::from_json(good, "config.json"));
  auto bad = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& word) {
    nlohmann::json j = good;
    edit(j);
    expect_error_naming([&] { ModelConfig::from_json(j, "cfg/config.json"); }, word);
    expect_error_naming([&] { ModelConfig::from_json(j, "cfg/config.json"); }, "cfg/config.json");
  };
  bad([](auto& j) { j.erase("hidden_size"); }, "hidden_size");
  bad([](auto& j) { j["num_experts"] = "eight"; }, "num_experts");
  bad([](auto& j) { j["num_key_value_heads"] = 3; }, "num_key_value_heads");
  bad([](auto& j) { j["num_experts_per_tok"] = 9; }, "num_experts_per_tok");
  bad([](auto& j) { j["model_type"] = "llama"; }, "llama");
  bad([](auto& j) { j["hidden_act"] = "gelu"; }, "hidden_act");
  bad([](auto& j) { j["mlp_only_layers"] = {7}; }, "mlp_only_layers");
  bad([](auto& j) { j["rope_scaling"] = {{"type", "yarn"}}; }, "rope_scaling");
  // transformers v5 keeps rope_theta under rope_parameters.
  nlohmann::json v5 = good;
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_theta", 1234.0}, {"rope_type", "default"}};
  EXPECT_EQ(ModelConfig::from_json(v5, "v5").rope_theta, 1234.0);
  expect_error_naming([] { ModelConfig::from_file("/nonexistent/config.json"); }, "/nonexistent/config.json");
}

TEST(Weights, SparseStepAndMlpOnlyLayersChooseDenseLayers) {
  ModelConfig c = config();
  c.num_hidden_layers = 4;
  c.decoder_sparse_step = 2;
  c.mlp_only_layers = {3};
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_FALSE(c.is_moe_layer(3));
  CausalLM m(c, kF32);
  EXPECT_TRUE(m->layer(0)->dense_mlp);
  EXPECT_TRUE(m->layer(1)->moe);
}

}  // namespace
}  // namespace glint
