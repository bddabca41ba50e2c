// Checkpoint loading (per-expert Hub form and packed form), export, config.json checks.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>

#include "core/error.h"
#include "io/model_files.h"
#include "model/weights.h"

#include "model_util.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::kF32;

namespace fs = std::filesystem;

std::string weights_dir(const std::string& name) { return glint::testing::fresh_temp_dir("weights_" + name); }

ModelConfig weights_config() {
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

using testing::expect_error_naming;

// Rewrites the per-expert checkpoint `hub` into `dir` in the packed transformers v5 form:
// gate_up_proj [E, 2I, H] (gate rows, then up rows) and down_proj [E, H, I], by stacking.
void write_packed_copy(const CheckpointReader& hub, const ModelConfig& c, const std::string& dir,
                       uint64_t max_shard_bytes = 5ull << 30) {
  std::vector<std::pair<std::string, at::Tensor>> packed;
  for (const auto& key : hub.keys())
    if (key.find(".mlp.experts.") == std::string::npos) packed.emplace_back(key, hub.read(key));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::vector<at::Tensor> gu, dn;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      std::string p = "model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + ".";
      gu.push_back(at::cat({hub.read(p + "gate_proj.weight"), hub.read(p + "up_proj.weight")}, 0));
      dn.push_back(hub.read(p + "down_proj.weight"));
    }
    std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    packed.emplace_back(p + "gate_up_proj", at::stack(gu));  // [E, 2I, H]
    packed.emplace_back(p + "down_proj", at::stack(dn));     // [E, H, I]
  }
  write_checkpoint(dir, packed, max_shard_bytes);
}

TEST(Weights, HubAndPackedFormsLoadToIdenticalTensors) {
  ModelConfig c = weights_config();
  CausalLM src(c, kF32);
  init_weights(*src, 11);
  // Per-expert Hub form, as save_pretrained writes it.
  std::string hub = weights_dir("hub");
  save_pretrained(*src, hub);
  CheckpointReader hr(hub);
  EXPECT_TRUE(hr.contains("model.layers.0.mlp.experts.3.up_proj.weight"));
  EXPECT_FALSE(hr.contains("model.layers.0.mlp.experts.gate_up_proj"));
  // Packed form built here by stacking the per-expert tensors read back from disk.
  std::string pk = weights_dir("packed");
  write_packed_copy(hr, c, pk, /*max_shard_bytes=*/4000);  // sharded, with an index
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

// FSDP reads arbitrary flat element ranges of parameters; from either checkpoint form
// they must equal the same range of the fully loaded parameter.
TEST(Weights, ParameterRangesMatchTheLoadedTensorsInBothForms) {
  ModelConfig c = weights_config();
  CausalLM src(c, kF32);
  init_weights(*src, 12);
  std::string hub = weights_dir("range_hub"), packed = weights_dir("range_packed");
  save_pretrained(*src, hub);
  write_packed_copy(CheckpointReader(hub), c, packed, 1 << 30);
  for (const std::string& dir : {hub, packed}) {
    CheckpointReader ckpt(dir);
    for (const auto& site : parameter_sites(*src)) {
      at::Tensor flat = site.tensor.detach().reshape({-1});
      int64_t n = flat.numel();
      for (auto [a, len] : std::vector<std::pair<int64_t, int64_t>>{{0, n}, {n / 3, n / 2}, {n - 1, 1}, {7 % n, 0}}) {
        at::Tensor got = read_parameter_range(ckpt, site, site.tensor.sizes(), a, len, at::kFloat);
        EXPECT_TRUE(at::equal(got, flat.narrow(0, a, len))) << dir << " " << site.name << " [" << a << ", +" << len << ")";
      }
    }
  }
}

TEST(Weights, Bf16CheckpointLoadsIntoFloat32) {
  ModelConfig c = weights_config();
  CausalLM src(c, TensorPlacement{at::kBFloat16, c10::Device(c10::kCPU)});
  init_weights(*src, 3);
  std::string d = weights_dir("bf16");
  save_pretrained(*src, d);
  EXPECT_EQ(CheckpointReader(d).info("model.norm.weight").dtype, at::kBFloat16);
  CausalLM dst = from_pretrained(d, kF32);
  EXPECT_TRUE(at::equal(dst->model->embed_tokens_weight, src->model->embed_tokens_weight.to(at::kFloat)));
}

TEST(Weights, MissingWrongShapeAndUnexpectedKeysAreErrors) {
  ModelConfig c = weights_config();
  CausalLM src(c, kF32);
  init_weights(*src, 1);
  auto sd = hub_state_dict(*src);
  auto write_and_load = [&](std::vector<std::pair<std::string, at::Tensor>> tensors) {
    std::string d = weights_dir("bad");
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
  // The sharded path (parameters read later by range) reports unexpected layer keys too,
  // and accepts every expert's per-expert key.
  std::string d = weights_dir("bad_sharded");
  write_checkpoint(d, extra);
  CausalLM m(c, kF32);
  expect_error_naming([&] { load_weights(*m, CheckpointReader(d), /*parameters=*/false); },
                      "unexpected key 'model.layers.0.mlp.shared_expert.weight'");
  std::string ok = weights_dir("good_sharded");
  write_checkpoint(ok, sd);
  CausalLM m2(c, kF32);
  EXPECT_NO_THROW(load_weights(*m2, CheckpointReader(ok), /*parameters=*/false));
  // A float8 tensor (raw codes, read as bytes) is refused, never loaded as numbers: the
  // final norm written as U8, then its header entry retyped to F8_E4M3 (same bytes).
  auto fp8 = sd;
  for (auto& [name, t] : fp8)
    if (name == "model.norm.weight") t = at::full(t.sizes(), 0x38, at::kByte);  // e4m3 1.0
  std::string q = weights_dir("fp8");
  write_checkpoint(q, fp8);
  const std::string file = q + "/model.safetensors";
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  std::string header = bytes.substr(8, n), body = bytes.substr(8 + n);
  const size_t at = header.find("\"U8\"");
  ASSERT_NE(at, std::string::npos) << header;
  header.replace(at, 4, "\"F8_E4M3\"");
  n = header.size();
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << body;
  out.close();
  CausalLM m3(c, kF32);
  expect_error_naming([&] { load_weights(*m3, CheckpointReader(q)); },
                      "key 'model.norm.weight' is stored as F8_E4M3, a quantised form");
}

TEST(Weights, ConfigJsonErrorsNameTheField) {
  nlohmann::json good = weights_config().to_json();
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
  ModelConfig c = weights_config();
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

TEST(Weights, HubKeysAreExactlyTheTransformersNames) {
  ModelConfig c = weights_config();  // H=16, Nh=2, Nkv=1, D=8, E=4, I=6, V=23, 2 MoE layers
  CausalLM m(c, kF32);
  init_weights(*m, 4);
  std::map<std::string, std::vector<int64_t>> want = {
      {"model.embed_tokens.weight", {23, 16}}, {"model.norm.weight", {16}}, {"lm_head.weight", {23, 16}}};
  for (int l = 0; l < 2; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    want[p + "input_layernorm.weight"] = {16};
    want[p + "post_attention_layernorm.weight"] = {16};
    want[p + "self_attn.q_proj.weight"] = {16, 16};
    want[p + "self_attn.k_proj.weight"] = {8, 16};
    want[p + "self_attn.v_proj.weight"] = {8, 16};
    want[p + "self_attn.o_proj.weight"] = {16, 16};
    want[p + "self_attn.q_norm.weight"] = {8};
    want[p + "self_attn.k_norm.weight"] = {8};
    want[p + "mlp.gate.weight"] = {4, 16};
    for (int e = 0; e < 4; ++e) {
      std::string q = p + "mlp.experts." + std::to_string(e) + ".";
      want[q + "gate_proj.weight"] = {6, 16};
      want[q + "up_proj.weight"] = {6, 16};
      want[q + "down_proj.weight"] = {16, 6};
    }
  }
  std::map<std::string, std::vector<int64_t>> got;
  for (const auto& [k, t] : hub_state_dict(*m)) {
    EXPECT_TRUE(got.emplace(k, t.sizes().vec()).second) << "duplicate " << k;
    // Values: expert e's gate rows [0, I), up rows [I, 2I) of the packed tensor.
    if (k == "model.layers.1.mlp.experts.3.up_proj.weight")
      EXPECT_TRUE(at::equal(t, m->layer(1)->moe->experts->gate_up_proj[3].narrow(0, 6, 6)));
    if (k == "model.layers.1.mlp.experts.3.gate_proj.weight")
      EXPECT_TRUE(at::equal(t, m->layer(1)->moe->experts->gate_up_proj[3].narrow(0, 0, 6)));
    if (k == "model.layers.0.mlp.experts.1.down_proj.weight")
      EXPECT_TRUE(at::equal(t, m->layer(0)->moe->experts->down_proj[1]));
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(expert_key(3, 12, "up_proj"), "model.layers.3.mlp.experts.12.up_proj.weight");
}

TEST(Weights, PartialExpertRangeLoadsOnlyItsSliceFromBothForms) {
  ModelConfig c = weights_config();
  CausalLM src(c, kF32);
  init_weights(*src, 5);
  std::string hub = weights_dir("partial_hub"), pk = weights_dir("partial_packed");
  save_pretrained(*src, hub);
  write_packed_copy(CheckpointReader(hub), c, pk);
  // Experts [first, first + 2) of 4, as an expert-parallel rank holds them.
  auto partial_model = [&](int64_t first) {
    CausalLM m(c, kF32);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      MoeBlock moe = m->layer(l)->moe;
      moe->experts = moe->replace_module(
          "experts", Experts(2, c.hidden_size, c.moe_intermediate_size, kF32, first));
    }
    return m;
  };
  for (const std::string& dir : {hub, pk}) {
    SCOPED_TRACE(dir);
    CausalLM m = partial_model(1);
    load_weights(*m, CheckpointReader(dir));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      ExpertsImpl& got = *m->layer(l)->moe->experts;
      ExpertsImpl& all = *src->layer(l)->moe->experts;
      EXPECT_TRUE(at::equal(got.gate_up_proj, all.gate_up_proj.narrow(0, 1, 2))) << l;
      EXPECT_TRUE(at::equal(got.down_proj, all.down_proj.narrow(0, 1, 2))) << l;
    }
    EXPECT_TRUE(at::equal(m->lm_head->weight, src->lm_head->weight));
    // A range past the checkpoint's experts names the key that lacks them.
    CausalLM beyond = partial_model(3);
    expect_error_naming([&] { load_weights(*beyond, CheckpointReader(dir)); },
                        dir == hub ? "model.layers.0.mlp.experts.4.gate_proj.weight"
                                   : "model.layers.0.mlp.experts.gate_up_proj");
  }
}

TEST(Weights, PackedFormErrorsNameTheKey) {
  ModelConfig c = weights_config();
  CausalLM src(c, kF32);
  init_weights(*src, 6);
  std::string hub = weights_dir("perr_hub");
  save_pretrained(*src, hub);
  CheckpointReader hr(hub);
  std::string pk = weights_dir("perr_packed");
  write_packed_copy(hr, c, pk);
  CheckpointReader pr(pk);
  auto load = [&](std::vector<std::pair<std::string, at::Tensor>> tensors) {
    std::string d = weights_dir("perr_bad");
    write_checkpoint(d, tensors);
    CausalLM m(c, kF32);
    load_weights(*m, CheckpointReader(d));
  };
  auto all = [&] {
    std::vector<std::pair<std::string, at::Tensor>> v;
    for (const auto& k : pr.keys()) v.emplace_back(k, pr.read(k));
    return v;
  };
  const std::string gu = "model.layers.1.mlp.experts.gate_up_proj", dn = "model.layers.1.mlp.experts.down_proj";
  auto v = all();
  for (auto& [k, t] : v)
    if (k == gu) t = at::zeros({4, 13, 16});  // 2I + 1 rows
  expect_error_naming([&] { load(v); }, gu);
  v = all();
  v.erase(std::remove_if(v.begin(), v.end(), [&](const auto& kv) { return kv.first == dn; }), v.end());
  expect_error_naming([&] { load(v); }, dn);
  v = all();  // both forms at once: the per-expert keys are not used
  v.emplace_back("model.layers.1.mlp.experts.0.up_proj.weight", hr.read("model.layers.1.mlp.experts.0.up_proj.weight"));
  expect_error_naming([&] { load(v); }, "model.layers.1.mlp.experts.0.up_proj.weight");
  EXPECT_NO_THROW(load(all()));
}

nlohmann::json dense_json() {
  return nlohmann::json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 29,
    "hidden_size": 12, "intermediate_size": 20, "num_hidden_layers": 2,
    "num_attention_heads": 3, "num_key_value_heads": 1, "head_dim": 4,
    "rope_theta": 1000000, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16"})");
}

TEST(ModelConfig, DenseQwen3FromJsonBuildsAndRuns) {
  ModelConfig c = ModelConfig::from_json(dense_json(), "dense/config.json");
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.num_experts, 0);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_FALSE(c.is_moe_layer(0));
  CausalLM m(c, kF32);
  init_weights(*m, 1);
  at::Tensor ids = at::tensor({1, 5, 28, 0}, at::kLong).view({1, 4});
  at::NoGradGuard ng;
  ForwardOutput out = m->forward(ids, at::arange(4, at::kLong).view({1, 4}), at::zeros({1, 4}, at::kLong));
  EXPECT_EQ(m->logits(out.hidden).sizes(), (std::vector<int64_t>{1, 4, 29}));
  EXPECT_TRUE(out.router_logits.empty());
  EXPECT_TRUE(at::isfinite(out.hidden).all().item<bool>());
  for (const auto& [k, t] : hub_state_dict(*m)) {
    EXPECT_EQ(k.find("experts"), std::string::npos) << k;
    EXPECT_NE(k, "lm_head.weight");
  }
  // head_dim defaults to hidden_size / num_attention_heads.
  nlohmann::json j = dense_json();
  j.erase("head_dim");
  EXPECT_EQ(ModelConfig::from_json(j, "x").head_dim, 4);
}

TEST(ModelConfig, MoreFieldErrorsNameTheField) {
  nlohmann::json moe = weights_config().to_json();
  auto bad = [](nlohmann::json j, const std::function<void(nlohmann::json&)>& edit, const std::string& word) {
    edit(j);
    expect_error_naming([&] { ModelConfig::from_json(j, "cfg/config.json"); }, word);
  };
  bad(moe, [](auto& j) { j.erase("num_experts"); }, "num_experts");
  bad(moe, [](auto& j) { j.erase("moe_intermediate_size"); }, "moe_intermediate_size");
  bad(moe, [](auto& j) { j["norm_topk_prob"] = "yes"; }, "norm_topk_prob");
  bad(moe, [](auto& j) { j["hidden_size"] = 16.5; }, "hidden_size");
  bad(moe, [](auto& j) { j["vocab_size"] = 0; }, "vocab_size");
  bad(moe, [](auto& j) { j["head_dim"] = 7; }, "head_dim");
  bad(moe, [](auto& j) { j["num_experts_per_tok"] = 0; }, "num_experts_per_tok");
  bad(moe, [](auto& j) { j["mlp_only_layers"] = {1}; j.erase("intermediate_size"); }, "intermediate_size");
  bad(moe, [](auto& j) { j.erase("model_type"); }, "model_type");
  bad(dense_json(), [](auto& j) { j["num_key_value_heads"] = 2; }, "num_key_value_heads");  // 3 % 2
  bad(dense_json(), [](auto& j) { j.erase("intermediate_size"); }, "intermediate_size");
  bad(dense_json(), [](auto& j) { j["rms_norm_eps"] = "small"; }, "rms_norm_eps");
  expect_error_naming([] { ModelConfig::from_json(nlohmann::json::array(), "arr/config.json"); }, "arr/config.json");
  std::string d = weights_dir("badjson");
  std::ofstream(d + "/config.json") << "{\"model_type\": \"qwen3\",";
  expect_error_naming([&] { ModelConfig::from_file(d + "/config.json"); }, d + "/config.json");
}

// A negative expert count is not "dense": transformers would fail on it, glint must say so.
TEST(ModelConfig, NegativeNumExpertsIsAnError) {
  nlohmann::json j = weights_config().to_json();
  j["num_experts"] = -4;
  expect_error_naming([&] { ModelConfig::from_json(j, "cfg/config.json"); }, "num_experts");
}

TEST(ModelConfig, ToJsonFromJsonRoundTrip) {
  ModelConfig c = weights_config();
  c.mlp_only_layers = {1};
  c.norm_topk_prob = false;
  c.output_router_logits = true;
  c.router_aux_loss_coef = 0.02;
  c.rope_theta = 12345.0;
  c.tie_word_embeddings = true;
  ModelConfig r = ModelConfig::from_json(c.to_json(), "roundtrip");
  EXPECT_EQ(r.to_json(), c.to_json());
  EXPECT_EQ(r.mlp_only_layers, (std::vector<int64_t>{1}));
  EXPECT_FALSE(r.norm_topk_prob);
  EXPECT_TRUE(r.output_router_logits);
}

// decoder_sparse_step 0 must be a glint::Error naming the field, not a division by zero.
// Runs in a child process so that a crash fails this test instead of the whole binary.
TEST(ModelConfigDeathTest, ZeroDecoderSparseStepIsAnErrorNotACrash) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  nlohmann::json j = weights_config().to_json();
  j["decoder_sparse_step"] = 0;
  EXPECT_EXIT(
      {
        int code = 3;
        try {
          ModelConfig::from_json(j, "cfg/config.json");
          code = 1;  // accepted
        } catch (const Error& e) {
          code = std::string(e.what()).find("decoder_sparse_step") != std::string::npos ? 0 : 2;
        }
        std::_Exit(code);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace glint
