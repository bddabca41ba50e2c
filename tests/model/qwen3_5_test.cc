// Qwen3.5-MoE against the independent float64 reference (tests/model/reference_qwen3_5.h):
// logits of the hybrid model, gradients of its new layers by finite differences, packed
// sequences (the DeltaNet state restarts at each), and the multimodal release's keys.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

#include "io/model_files.h"
#include "model/causal_lm.h"
#include "model/qwen3_5/attention.h"
#include "model/qwen3_5/family.h"
#include "model/reference.h"
#include "model/reference_qwen3_5.h"
#include "model/weights.h"
#include "model_util.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::kF64;
using glint::testing::positions;
using glint::testing::logits_of;

using nlohmann::json;

json qwen3_5_json() {
  json j = qwen3_5_family().tiny(48).to_json();
  j["layer_types"] = {"linear_attention", "full_attention", "linear_attention"};
  j["num_hidden_layers"] = 3;
  j["attention_bias"] = false;
  return j;
}

void randomize_qwen3_5(CausalLMImpl& m, uint64_t seed) {
  at::NoGradGuard ng;
  at::manual_seed(seed);
  for (auto& p : m.parameters()) p.copy_(at::randn(p.sizes(), p.options()) * 0.3 + (p.dim() == 1 ? 0.5 : 0.0));
}

// The model's tensors under the reference's names: no "model." prefix, packed experts.
std::map<std::string, at::Tensor> reference_weights(CausalLMImpl& m) {
  std::map<std::string, at::Tensor> out;
  for (auto& item : m.named_parameters()) {
    std::string k = item.key();
    if (k.rfind("model.", 0) == 0) k = k.substr(6);
    out[k] = item.value().detach();
  }
  return out;
}

TEST(Qwen3_5, LogitsMatchTheNaiveReference) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    json j = qwen3_5_json();
    j["tie_word_embeddings"] = tied;
    CausalLM m(ModelConfig::from_json(j, "test config"), kF64);
    randomize_qwen3_5(*m, tied ? 2 : 1);
    at::Tensor ids = at::randint(0, 48, {2, 11}, at::kLong);
    at::NoGradGuard ng;
    at::Tensor got = logits_of(*m, ids, positions(ids), at::zeros_like(ids));
    at::Tensor want = testing::qwen3_5_moe_reference_logits(j, reference_weights(*m), ids);
    double err = (got - want).abs().max().item<double>() / want.abs().max().item<double>();
    EXPECT_LT(err, 1e-10) << "largest relative difference " << err;
  }
}

TEST(Qwen3_5, PackedSequencesEqualEachSequenceAlone) {
  json j = qwen3_5_json();
  CausalLM m(ModelConfig::from_json(j, "test config"), kF64);
  randomize_qwen3_5(*m, 3);
  at::NoGradGuard ng;
  // Row 0: sequences of 5 and 4 tokens then 2 padding; row 1: one of 11.
  at::Tensor ids = at::randint(0, 48, {2, 11}, at::kLong);
  at::Tensor seg = at::tensor(std::vector<int64_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                              at::kLong).view({2, 11});
  at::Tensor pos = at::tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
                              at::kLong).view({2, 11});
  at::Tensor packed = logits_of(*m, ids, pos, seg);
  auto alone = [&](int64_t row, int64_t start, int64_t len) {
    at::Tensor x = ids[row].narrow(0, start, len).unsqueeze(0);
    return logits_of(*m, x, positions(x), at::zeros_like(x))[0];
  };
  EXPECT_TRUE(at::allclose(packed[0].narrow(0, 0, 5), alone(0, 0, 5), 1e-10, 1e-12));
  EXPECT_TRUE(at::allclose(packed[0].narrow(0, 5, 4), alone(0, 5, 4), 1e-10, 1e-12));
  EXPECT_TRUE(at::allclose(packed[1], alone(1, 0, 11), 1e-10, 1e-12));
}

TEST(Qwen3_5, GradientsOfGatedAttentionAndDeltaNetMatchFiniteDifferences) {
  CausalLM m(ModelConfig::from_json(qwen3_5_json(), "test config"), kF64);
  randomize_qwen3_5(*m, 4);
  at::Tensor ids = at::randint(0, 48, {2, 6}, at::kLong);
  at::Tensor probe = at::randn({2, 6, 48}, at::kDouble);
  auto f = [&] { return (logits_of(*m, ids, positions(ids), at::zeros_like(ids)) * probe).sum(); };
  auto* delta = m->layer(0)->attention<GatedDeltaNetImpl>();
  auto* attn = m->layer(1)->attention<GatedAttentionImpl>();
  ASSERT_NE(delta, nullptr);
  ASSERT_NE(attn, nullptr);
  MoeBlock moe = m->layer(1)->moe;
  for (auto* p : {&delta->in_proj_qkv->weight, &delta->in_proj_z->weight, &delta->in_proj_b->weight,
                  &delta->in_proj_a->weight, &delta->conv1d->weight, &delta->dt_bias, &delta->A_log,
                  &delta->norm->weight, &delta->out_proj->weight, &attn->q_proj->weight, &attn->q_norm->weight,
                  &attn->k_norm->weight, &moe->shared_expert_gate->weight, &moe->shared_experts->up_proj->weight}) {
    p->set_requires_grad(true);
    EXPECT_LT(testing::fd_check(f, *p), 1e-6);
    p->set_requires_grad(false);
  }
}

// The release's checkpoint: a multimodal config with text_config, text weights under
// "model.language_model.", vision and MTP weights beside them.
TEST(Qwen3_5, MultimodalReleaseLoadsAsTheTextModel) {
  std::string d = testing::fresh_temp_dir("qwen3_5_release");
  json text = qwen3_5_json();
  CausalLM m(ModelConfig::from_json(text, "test config"), kF64);
  randomize_qwen3_5(*m, 5);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& [k, t] : hub_state_dict(*m))
    tensors.emplace_back(k.rfind("model.", 0) == 0 ? "model.language_model." + k.substr(6) : k, t);
  tensors.emplace_back("model.visual.blocks.0.attn.qkv.weight", at::ones({4, 4}, at::kDouble));
  tensors.emplace_back("mtp.fc.weight", at::ones({4, 4}, at::kDouble));
  write_checkpoint(d, tensors);
  json release = {{"model_type", "qwen3_5_moe"}, {"tie_word_embeddings", false}, {"text_config", text},
                  {"vision_config", {{"depth", 1}}}};
  release["text_config"]["model_type"] = "qwen3_5_moe_text";
  std::ofstream(d + "/config.json") << release.dump();
  CausalLM loaded = from_pretrained(d, kF64);
  auto a = m->named_parameters(), b = loaded->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i].value(), b[i].value())) << a[i].key();
  // Saved as the text model, experts packed as the release stores them.
  save_pretrained(*loaded, d + "/saved");
  CheckpointReader saved(d + "/saved");
  EXPECT_TRUE(saved.contains("model.layers.0.mlp.experts.gate_up_proj"));
  EXPECT_TRUE(saved.contains("model.layers.0.linear_attn.A_log"));
  EXPECT_EQ(ModelConfig::from_file(d + "/saved/config.json").model_type, "qwen3_5_moe_text");
}

TEST(Qwen3_5, ConfigErrorsNameTheField) {
  auto bad = [](const std::function<void(json&)>& edit, const std::string& needle) {
    json j = qwen3_5_json();
    edit(j);
    testing::expect_error_naming([&] { ModelConfig::from_json(j, "cfg.json"); }, needle);
  };
  bad([](json& j) { j["layer_types"] = {"linear_attention"}; }, "layer_types");
  bad([](json& j) { j["layer_types"] = {"sliding", "full_attention", "linear_attention"}; }, "sliding");
  bad([](json& j) { j["linear_num_value_heads"] = 3; }, "linear_num_value_heads");
  bad([](json& j) { j["rope_parameters"]["rope_type"] = "yarn"; }, "yarn");
  bad([](json& j) { j["rope_parameters"]["partial_rotary_factor"] = 0.1; }, "partial_rotary_factor");
  bad([](json& j) { j["model_type"] = "qwen3_5_moe"; }, "text_config");
}

}  // namespace
}  // namespace glint
