// Qwen3-Next against the independent float64 reference (tests/model/reference_qwen3_5.h):
// a checkpoint written in the release's on-disk layout (fused in_proj_qkvz / in_proj_ba,
// per-expert keys, an MTP tensor beside them) loads through glint's loader and gives the
// reference's logits and loss; packed sequences equal each sequence alone; save_pretrained
// writes the same keys back.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "io/model_files.h"
#include "model/causal_lm.h"
#include "model/qwen3_5/attention.h"
#include "model/qwen3_next/family.h"
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
constexpr int64_t kNextVocab = 48;

// Four layers: DeltaNet, attention, DeltaNet, attention; layer 2 dense (mlp_only_layers),
// the others MoE. Key heads serve two value heads each, Dk != Dv.
json test_json() {
  json j = qwen3_next_family().tiny(kNextVocab).to_json();
  j["num_hidden_layers"] = 4;
  j["layer_types"] = {"linear_attention", "full_attention", "linear_attention", "full_attention"};
  j["mlp_only_layers"] = {2};
  return j;
}

// Random weights under the names and shapes transformers' Qwen3NextForCausalLM stores,
// written from the config alone (not from glint's modules). 1-D weights sit around 0.5.
std::vector<std::pair<std::string, at::Tensor>> on_disk_weights(const json& j, uint64_t seed) {
  at::manual_seed(seed);
  const int64_t H = j["hidden_size"], V = j["vocab_size"], L = j["num_hidden_layers"], D = j["head_dim"];
  const int64_t Nh = j["num_attention_heads"], Nkv = j["num_key_value_heads"];
  const int64_t Hk = j["linear_num_key_heads"], Hv = j["linear_num_value_heads"], Dk = j["linear_key_head_dim"],
                Dv = j["linear_value_head_dim"], W = j["linear_conv_kernel_dim"];
  const int64_t E = j["num_experts"], I = j["moe_intermediate_size"], Is = j["shared_expert_intermediate_size"],
                F = j["intermediate_size"], step = j["decoder_sparse_step"];
  const std::vector<int64_t> dense = j["mlp_only_layers"].get<std::vector<int64_t>>();
  std::vector<std::pair<std::string, at::Tensor>> w;
  auto add = [&](const std::string& key, std::vector<int64_t> shape) {
    at::Tensor t = at::randn(shape, at::kDouble) * 0.3 + (shape.size() == 1 ? 0.5 : 0.0);
    w.emplace_back(key, t);
  };
  add("model.embed_tokens.weight", {V, H});
  add("model.norm.weight", {H});
  if (!j.value("tie_word_embeddings", false)) add("lm_head.weight", {V, H});
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {H});
    add(p + "post_attention_layernorm.weight", {H});
    if (j["layer_types"][l] == "full_attention") {
      add(p + "self_attn.q_proj.weight", {Nh * 2 * D, H});
      add(p + "self_attn.k_proj.weight", {Nkv * D, H});
      add(p + "self_attn.v_proj.weight", {Nkv * D, H});
      add(p + "self_attn.o_proj.weight", {H, Nh * D});
      add(p + "self_attn.q_norm.weight", {D});
      add(p + "self_attn.k_norm.weight", {D});
    } else {
      add(p + "linear_attn.in_proj_qkvz.weight", {2 * Hk * Dk + 2 * Hv * Dv, H});
      add(p + "linear_attn.in_proj_ba.weight", {2 * Hv, H});
      add(p + "linear_attn.conv1d.weight", {2 * Hk * Dk + Hv * Dv, 1, W});
      add(p + "linear_attn.dt_bias", {Hv});
      add(p + "linear_attn.A_log", {Hv});
      add(p + "linear_attn.norm.weight", {Dv});
      add(p + "linear_attn.out_proj.weight", {H, Hv * Dv});
    }
    const bool moe = std::find(dense.begin(), dense.end(), l) == dense.end() && E > 0 && (l + 1) % step == 0;
    if (moe) {
      add(p + "mlp.gate.weight", {E, H});
      for (int64_t e = 0; e < E; ++e) {
        const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
        add(ep + "gate_proj.weight", {I, H});
        add(ep + "up_proj.weight", {I, H});
        add(ep + "down_proj.weight", {H, I});
      }
      add(p + "mlp.shared_expert.gate_proj.weight", {Is, H});
      add(p + "mlp.shared_expert.up_proj.weight", {Is, H});
      add(p + "mlp.shared_expert.down_proj.weight", {H, Is});
      add(p + "mlp.shared_expert_gate.weight", {1, H});
    } else {
      add(p + "mlp.gate_proj.weight", {F, H});
      add(p + "mlp.up_proj.weight", {F, H});
      add(p + "mlp.down_proj.weight", {H, F});
    }
  }
  return w;
}

// A checkpoint directory: config.json and the on-disk weights, plus an MTP tensor the
// loader must skip.
std::string write_release(const std::string& name, const json& j,
                          const std::vector<std::pair<std::string, at::Tensor>>& weights) {
  std::string d = testing::fresh_temp_dir(name);
  auto tensors = weights;
  tensors.emplace_back("mtp.fc.weight", at::ones({4, 4}, at::kDouble));
  write_checkpoint(d, tensors);
  std::ofstream(d + "/config.json") << j.dump();
  return d;
}

// The reference's names: no "model." prefix.
std::map<std::string, at::Tensor> reference_names(const std::vector<std::pair<std::string, at::Tensor>>& weights) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [k, t] : weights) out[k.rfind("model.", 0) == 0 ? k.substr(6) : k] = t;
  return out;
}

// Sum of next-token cross-entropy over every position with a successor: logits [B,S,V].
double cross_entropy_sum(const at::Tensor& logits, const at::Tensor& ids) {
  const int64_t S = ids.size(1);
  at::Tensor lp = at::log_softmax(logits.narrow(1, 0, S - 1), -1);
  return -lp.gather(2, ids.narrow(1, 1, S - 1).unsqueeze(-1)).sum().item<double>();
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).abs().max().item<double>() / want.abs().max().item<double>();
}

TEST(Qwen3Next, LoadedCheckpointMatchesTheNaiveReference) {
  struct Case {
    const char* name;
    std::function<void(json&)> edit;
  };
  const std::vector<Case> cases = {
      {"mlp_only_layers", [](json&) {}},
      {"tied", [](json& j) { j["tie_word_embeddings"] = true; }},
      // MoE on layers 1 and 3 only, router weights not renormalised.
      {"sparse_step_2_unnormalised", [](json& j) {
         j["mlp_only_layers"] = json::array();
         j["decoder_sparse_step"] = 2;
         j["norm_topk_prob"] = false;
       }},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    json j = test_json();
    c.edit(j);
    auto weights = on_disk_weights(j, seed++);
    CausalLM m = from_pretrained(write_release(std::string("qwen3_next_") + c.name, j, weights), kF64);
    at::Tensor ids = at::randint(0, kNextVocab, {2, 11}, at::kLong);
    at::NoGradGuard ng;
    at::Tensor got = logits_of(*m, ids, positions(ids), at::zeros_like(ids));
    at::Tensor want = testing::qwen3_next_reference_logits(j, reference_names(weights), ids);
    const double err = relative_error(got, want);
    EXPECT_LT(err, 1e-10) << "largest relative difference of the logits " << err;
    const double loss = causal_lm_loss(*m, ids, ids, positions(ids), at::zeros_like(ids)).ce_sum.item<double>();
    const double want_loss = cross_entropy_sum(want, ids);
    EXPECT_LT(std::abs(loss - want_loss) / want_loss, 1e-10) << loss << " vs " << want_loss;
    std::printf("qwen3_next %s: logits max relative error %.2e, loss %.12f vs %.12f\n", c.name, err, loss, want_loss);
  }
}

TEST(Qwen3Next, PackedSequencesEqualEachSequenceAlone) {
  json j = test_json();
  CausalLM m = from_pretrained(write_release("qwen3_next_packed", j, on_disk_weights(j, 7)), kF64);
  at::NoGradGuard ng;
  // Row 0: sequences of 5 and 4 tokens then 2 padding; row 1: one of 11.
  at::Tensor ids = at::randint(0, kNextVocab, {2, 11}, at::kLong);
  at::Tensor seg = at::tensor(std::vector<int64_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                              at::kLong).view({2, 11});
  at::Tensor pos = at::tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
                              at::kLong).view({2, 11});
  at::Tensor packed = logits_of(*m, ids, pos, seg);
  auto alone = [&](int64_t row, int64_t start, int64_t len) {
    at::Tensor x = ids[row].narrow(0, start, len).unsqueeze(0);
    return logits_of(*m, x, positions(x), at::zeros_like(x))[0];
  };
  double worst = 0;
  for (auto [row, start, len] : std::vector<std::array<int64_t, 3>>{{0, 0, 5}, {0, 5, 4}, {1, 0, 11}}) {
    at::Tensor want = alone(row, start, len);
    const double err = relative_error(packed[row].narrow(0, start, len), want);
    worst = std::max(worst, err);
    EXPECT_LT(err, 1e-12) << "row " << row << " tokens [" << start << ", +" << len << ")";
  }
  std::printf("qwen3_next packed vs alone: max relative error %.2e\n", worst);
}

TEST(Qwen3Next, GradientsOfTheFusedProjectionsMatchFiniteDifferences) {
  json j = test_json();
  CausalLM m = from_pretrained(write_release("qwen3_next_grad", j, on_disk_weights(j, 8)), kF64);
  for (auto& p : m->parameters()) p.set_requires_grad(false);
  at::Tensor ids = at::randint(0, kNextVocab, {2, 6}, at::kLong);
  at::Tensor probe = at::randn({2, 6, kNextVocab}, at::kDouble);
  auto f = [&] { return (logits_of(*m, ids, positions(ids), at::zeros_like(ids)) * probe).sum(); };
  auto* delta = m->layer(0)->attention<GatedDeltaNetImpl>();
  ASSERT_NE(delta, nullptr);
  ASSERT_TRUE(delta->in_proj_qkvz && delta->in_proj_ba);
  EXPECT_FALSE(delta->in_proj_qkv || delta->in_proj_z || delta->in_proj_b || delta->in_proj_a);
  DenseMlp dense = m->layer(2)->dense_mlp;
  ASSERT_TRUE(dense);
  for (auto* p : {&delta->in_proj_qkvz->weight, &delta->in_proj_ba->weight, &delta->conv1d->weight,
                  &dense->up_proj->weight}) {
    p->set_requires_grad(true);
    EXPECT_LT(testing::fd_check(f, *p, 24), 1e-6);
    p->set_requires_grad(false);
  }
}

// save_pretrained writes the release's form: flat keys, per-expert tensors, the fused
// projections; exactly the keys it was loaded from (less the skipped MTP tensor).
TEST(Qwen3Next, SaveWritesTheOnDiskFormBack) {
  json j = test_json();
  auto weights = on_disk_weights(j, 9);
  std::string d = write_release("qwen3_next_save", j, weights);
  CausalLM m = from_pretrained(d, kF64);
  save_pretrained(*m, d + "/saved");
  CheckpointReader saved(d + "/saved");
  std::set<std::string> want;
  for (const auto& [k, t] : weights) want.insert(k);
  std::vector<std::string> keys = saved.keys();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()), want);
  EXPECT_TRUE(saved.contains("model.layers.0.mlp.experts.7.down_proj.weight"));
  EXPECT_TRUE(saved.contains("model.layers.0.linear_attn.in_proj_qkvz.weight"));
  EXPECT_TRUE(saved.contains("model.layers.2.linear_attn.in_proj_ba.weight"));
  EXPECT_FALSE(saved.contains("model.layers.0.mlp.experts.gate_up_proj"));
  for (const auto& [k, t] : weights) EXPECT_TRUE(at::equal(saved.read(k).to(at::kDouble), t)) << k;
  // And back: the same model.
  CausalLM again = from_pretrained(d + "/saved", kF64);
  auto a = m->named_parameters(), b = again->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i].value(), b[i].value())) << a[i].key();
  // The same config.json, but for the dtype, which names the saved tensors'.
  ModelConfig c = ModelConfig::from_file(d + "/saved/config.json");
  EXPECT_EQ(c.model_type, "qwen3_next");
  EXPECT_EQ(c.torch_dtype, "float64");
  json saved_json = c.to_json(), loaded_json = m->config.to_json();
  saved_json.erase("torch_dtype");
  loaded_json.erase("torch_dtype");
  EXPECT_EQ(saved_json, loaded_json);
}

// The release's config.json (Qwen3-Next-80B-A3B): full_attention_interval and RoPE at the
// top level, no layer_types.
TEST(Qwen3Next, ReleaseConfigReadsWithItsDefaults) {
  json j = {{"architectures", {"Qwen3NextForCausalLM"}},
            {"model_type", "qwen3_next"},
            {"vocab_size", 151936},
            {"hidden_size", 2048},
            {"intermediate_size", 5120},
            {"num_hidden_layers", 48},
            {"num_attention_heads", 16},
            {"num_key_value_heads", 2},
            {"head_dim", 256},
            {"full_attention_interval", 4},
            {"partial_rotary_factor", 0.25},
            {"rope_theta", 10000000},
            {"rope_scaling", nullptr},
            {"decoder_sparse_step", 1},
            {"mlp_only_layers", json::array()},
            {"norm_topk_prob", true},
            {"num_experts", 512},
            {"num_experts_per_tok", 10},
            {"moe_intermediate_size", 512},
            {"shared_expert_intermediate_size", 512},
            {"linear_conv_kernel_dim", 4},
            {"linear_key_head_dim", 128},
            {"linear_value_head_dim", 128},
            {"linear_num_key_heads", 16},
            {"linear_num_value_heads", 32},
            {"rms_norm_eps", 1e-6},
            {"tie_word_embeddings", false},
            {"torch_dtype", "bfloat16"}};
  ModelConfig c = ModelConfig::from_json(j, "config.json");
  ASSERT_EQ(c.layer_types.size(), 48u);
  for (int64_t l = 0; l < 48; ++l) {
    EXPECT_EQ(c.layer_types[l], (l + 1) % 4 == 0 ? "full_attention" : "linear_attention") << l;
    EXPECT_TRUE(c.is_moe_layer(l)) << l;
  }
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(int64_t(c.head_dim * c.partial_rotary_factor), 64);
  EXPECT_TRUE(c.norm_unit_offset);
  // Left out, the fields take Qwen3NextConfig's defaults.
  json minimal = {{"model_type", "qwen3_next"}, {"vocab_size", 64}, {"hidden_size", 32},
                  {"num_hidden_layers", 8},     {"num_attention_heads", 16}};
  ModelConfig d = ModelConfig::from_json(minimal, "config.json");
  EXPECT_EQ(d.num_key_value_heads, 2);
  EXPECT_EQ(d.head_dim, 256);
  EXPECT_EQ(d.partial_rotary_factor, 0.25);
  EXPECT_EQ(d.num_experts, 512);
  EXPECT_EQ(d.num_experts_per_tok, 10);
  EXPECT_EQ(d.intermediate_size, 5632);
  EXPECT_TRUE(d.norm_topk_prob);
  EXPECT_EQ(d.layer_types[3], "full_attention");
  EXPECT_EQ(d.layer_types[4], "linear_attention");
}

TEST(Qwen3Next, ConfigErrorsNameTheField) {
  auto bad = [](const std::function<void(json&)>& edit, const std::string& needle) {
    json j = test_json();
    edit(j);
    testing::expect_error_naming([&] { ModelConfig::from_json(j, "cfg.json"); }, needle);
  };
  bad([](json& j) { j["layer_types"] = {"linear_attention"}; }, "layer_types");
  bad([](json& j) { j["layer_types"][1] = "sliding_attention"; }, "sliding_attention");
  bad([](json& j) { j["linear_num_value_heads"] = 3; }, "linear_num_value_heads");
  bad([](json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; }, "yarn");
  bad([](json& j) { j["partial_rotary_factor"] = 0.1; }, "partial_rotary_factor");
  bad([](json& j) { j["norm_topk_prob"] = "yes"; }, "norm_topk_prob");
  bad([](json& j) { j["decoder_sparse_step"] = 0; }, "decoder_sparse_step");
  bad([](json& j) { j["mlp_only_layers"] = {4}; }, "mlp_only_layers");
  bad([](json& j) { j["intermediate_size"] = 0; }, "intermediate_size");
  bad([](json& j) { j["shared_expert_intermediate_size"] = 0; }, "shared_expert_intermediate_size");
  bad([](json& j) { j["full_attention_interval"] = 0; j.erase("layer_types"); }, "full_attention_interval");
}

}  // namespace
}  // namespace glint
