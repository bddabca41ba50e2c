// LoRA as a model transform (targets, init, freezing, detaching, linear numerics) and the
// PEFT files of real models: expert tensors in the state dict and on disk against index
// loops, PEFT's own delta formula, single-target key names, round trips.
//
// Legend: E experts, r rank, in/out features of the adapted projection, H hidden, I expert width.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"
#include "lora/peft_io.h"
#include "model/causal_lm.h"
#include "model/qwen3/attention.h"
#include "model/reference.h"
#include "lora_test_util.h"
#include "model_util.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::kF64;
using glint::testing::kF32;

using namespace glint::testing;


ModelConfig dense_config() {
  ModelConfig c = lora_test_config();
  c.model_type = "qwen3";
  c.num_experts = 0;
  c.num_experts_per_tok = 0;
  c.mlp_only_layers.clear();
  return c;
}

void randomize_adapters(LoraModel& lora, double scale = 0.5) {
  at::NoGradGuard ng;
  for (auto& s : lora.sites) {
    s.A().copy_(at::randn(s.A().sizes(), at::kDouble) * scale);
    s.B().copy_(at::randn(s.B().sizes(), at::kDouble) * scale);
  }
}

TEST(Peft, ExpertSitesInStateDictAndFileMatchIndexLoopsAndPeftDelta) {
  at::manual_seed(31);
  ModelConfig c = lora_test_config();
  CausalLM m(c, kF64);
  init_weights(*m, 3);
  LoraOptions o;
  o.r = 2;
  o.alpha = 3;
  o.dtype = at::kDouble;
  LoraModel lora = apply_lora(*m, o, 9);
  randomize_adapters(lora);
  std::string d = fresh_temp_dir("lora_expert_file");
  save_adapter(d, lora, "tiny/base");
  SafetensorsFile file(d + "/adapter_model.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  std::map<std::string, at::Tensor> sd;
  for (auto& [k, t] : peft_state_dict(lora)) sd[k] = t;
  std::vector<std::string> keys(file.keys());
  std::set<std::string> file_keys(keys.begin(), keys.end()), sd_keys;
  for (auto& [k, t] : sd) sd_keys.insert(k);
  EXPECT_EQ(file_keys, sd_keys);

  const int64_t E = 3, r = 2;
  const double scale = 1.5;
  const std::string L0 = "base_model.model.model.layers.0.";
  std::map<std::string, at::Tensor> delta;  // per expert parameter: [E, out, in] from the file
  for (auto& s : lora.sites) {
    std::string base = s.experts ? L0 + (s.parameter == "gate_up_proj" ? "mlp.experts.base_layer" : "mlp.experts")
                                 : "base_model.model." + s.module_path;
    at::Tensor fa = file.read(base + ".lora_A.weight"), fb = file.read(base + ".lora_B.weight");
    if (!s.experts) {
      EXPECT_TRUE(at::equal(fa, s.A()) && at::equal(sd.at(base + ".lora_A.weight"), s.A())) << base;
      EXPECT_TRUE(at::equal(fb, s.B()) && at::equal(sd.at(base + ".lora_B.weight"), s.B())) << base;
      continue;
    }
    SCOPED_TRACE(s.parameter);
    at::Tensor A = s.A().detach(), B = s.B().detach();  // [E, r, in], [E, out, r]
    const int64_t in = A.size(2), out = B.size(1);
    at::Tensor wantA = at::empty({E * r, in}, at::kDouble), wantB = at::empty({out, E * r}, at::kDouble);
    auto a = A.accessor<double, 3>(), b = B.accessor<double, 3>();
    auto wa = wantA.accessor<double, 2>(), wb = wantB.accessor<double, 2>();
    for (int64_t e = 0; e < E; ++e)
      for (int64_t j = 0; j < r; ++j) {
        for (int64_t i = 0; i < in; ++i) wa[e * r + j][i] = a[e][j][i];
        for (int64_t o2 = 0; o2 < out; ++o2) wb[o2][j * E + e] = b[e][o2][j];
      }
    EXPECT_TRUE(at::equal(fa, wantA));
    EXPECT_TRUE(at::equal(fb, wantB));
    EXPECT_TRUE(at::equal(sd.at(base + ".lora_A.weight"), wantA));
    EXPECT_TRUE(at::equal(sd.at(base + ".lora_B.weight"), wantB));
    // PEFT's get_delta_weight: A -> (E, r, in), B -> (out, r, E),
    // einsum("o r e, e r i -> e o i") * scale; it must be scale * B_e A_e.
    at::Tensor A3 = fa.reshape({E, r, in}), B3 = fb.reshape({out, r, E});
    at::Tensor dl = at::zeros({E, out, in}, at::kDouble);
    auto x3 = A3.accessor<double, 3>(), y3 = B3.accessor<double, 3>();
    auto dd = dl.accessor<double, 3>();
    for (int64_t e = 0; e < E; ++e)
      for (int64_t o2 = 0; o2 < out; ++o2)
        for (int64_t i = 0; i < in; ++i) {
          for (int64_t j = 0; j < r; ++j) dd[e][o2][i] += y3[o2][j][e] * x3[e][j][i];
          dd[e][o2][i] *= scale;
        }
    for (int64_t e = 0; e < E; ++e)
      EXPECT_TRUE(at::allclose(dl[e], scale * at::mm(B[e], A[e]), 1e-12, 1e-12)) << "expert " << e;
    delta[s.parameter] = dl;
  }
  ASSERT_EQ(delta.size(), 2u);
  // The adapted MoE block computes the experts W_e + delta_e that PEFT reads from the file.
  MoeBlock moe = m->layer(0)->moe;
  at::Tensor x = at::randn({9, c.hidden_size}, at::kDouble);
  at::NoGradGuard ng;
  at::Tensor got = moe->forward(x);
  for (int64_t t = 0; t < 9; ++t) {
    at::Tensor want = at::zeros({c.hidden_size}, at::kDouble);
    for (auto [e, w] : route_ref(moe->gate->weight, x[t], 2, c.norm_topk_prob))
      want += w * expert_ref(moe->experts->gate_up_proj[e] + delta["gate_up_proj"][e],
                             moe->experts->down_proj[e] + delta["down_proj"][e], x[t]);
    EXPECT_TRUE(at::allclose(got[t], want, 1e-10, 1e-12)) << "token " << t;
  }
}

TEST(Peft, SingleExpertTargetsUseTheModulePathAndRoundTrip) {
  at::manual_seed(32);
  ModelConfig c = lora_test_config();
  CausalLM m(c, kF32);
  init_weights(*m, 4);
  LoraOptions o;
  LoraOptions::parse_targets("q_proj, v_proj,experts.down_proj", "--lora-targets", &o);
  o.r = 2;
  o.alpha = 4;
  LoraModel lora = apply_lora(*m, o, 2);
  randomize_adapters(lora);
  std::string d = fresh_temp_dir("lora_single");
  save_adapter(d, lora, "org/model");
  const std::string P = "base_model.model.model.layers.";
  std::map<std::string, std::vector<int64_t>> want = {
      {P + "0.self_attn.q_proj.lora_A.weight", {2, 8}}, {P + "0.self_attn.q_proj.lora_B.weight", {8, 2}},
      {P + "0.self_attn.v_proj.lora_A.weight", {2, 8}}, {P + "0.self_attn.v_proj.lora_B.weight", {4, 2}},
      {P + "1.self_attn.q_proj.lora_A.weight", {2, 8}}, {P + "1.self_attn.q_proj.lora_B.weight", {8, 2}},
      {P + "1.self_attn.v_proj.lora_A.weight", {2, 8}}, {P + "1.self_attn.v_proj.lora_B.weight", {4, 2}},
      {P + "0.mlp.experts.lora_A.weight", {3 * 2, 5}}, {P + "0.mlp.experts.lora_B.weight", {8, 2 * 3}}};
  std::map<std::string, std::vector<int64_t>> got;
  SafetensorsFile file(d + "/adapter_model.safetensors");
  for (const auto& k : file.keys()) got[k] = file.info(k).shape;
  EXPECT_EQ(got, want);
  auto cfg = nlohmann::json::parse(std::ifstream(d + "/adapter_config.json"));
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["task_type"], "CAUSAL_LM");
  EXPECT_EQ(cfg["base_model_name_or_path"], "org/model");
  EXPECT_EQ(cfg["r"], 2);
  EXPECT_EQ(cfg["lora_alpha"], 4.0);
  EXPECT_EQ(cfg["use_rslora"], false);
  EXPECT_EQ(cfg["target_modules"], nlohmann::json({"q_proj", "v_proj"}));
  EXPECT_EQ(cfg["target_parameters"], nlohmann::json({"mlp.experts.down_proj"}));

  CausalLM fresh(c, kF32);
  init_weights(*fresh, 4);
  LoraModel loaded = load_adapter(d, *fresh);
  expect_same_adapters(lora, loaded);
  EXPECT_TRUE(at::equal(logits_of(*m), logits_of(*fresh)));

  // gate_up_proj alone also sits at the module path, with A [E*r, H] and B [2I, E*r].
  CausalLM g(c, kF32);
  LoraOptions only;
  LoraOptions::parse_targets("experts.gate_up_proj", "t", &only);
  only.r = 2;
  LoraModel lg = apply_lora(*g, only, 1);
  auto sd = peft_state_dict(lg);
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, P + "0.mlp.experts.lora_A.weight");
  EXPECT_EQ(sd[0].second.sizes(), (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(sd[1].first, P + "0.mlp.experts.lora_B.weight");
  EXPECT_EQ(sd[1].second.sizes(), (std::vector<int64_t>{10, 6}));
}

// PEFT keeps target_parameters as the user listed them; the nesting (and so the key
// names) follows the experts module's registration order whatever the listed order.
TEST(Peft, ExpertTargetsListedInReverseOrderLoadTheSameKeys) {
  at::manual_seed(34);
  ModelConfig c = lora_test_config();
  CausalLM m(c, kF32), fresh(c, kF32);
  init_weights(*m, 6);
  init_weights(*fresh, 6);
  LoraOptions o;
  o.r = 2;
  LoraModel lora = apply_lora(*m, o, 3);
  randomize_adapters(lora);
  std::string d = fresh_temp_dir("lora_reversed");
  save_adapter(d, lora, "base");
  auto cfg = nlohmann::json::parse(std::ifstream(d + "/adapter_config.json"));
  cfg["target_parameters"] = {"mlp.experts.down_proj", "mlp.experts.gate_up_proj"};
  std::ofstream(d + "/adapter_config.json") << cfg.dump();
  LoraModel loaded = load_adapter(d, *fresh);
  expect_same_adapters(lora, loaded);
  EXPECT_TRUE(at::equal(logits_of(*m), logits_of(*fresh)));
}

TEST(Lora, ApplyFreezesBaseInitializesLikePeftAndDetachRestores) {
  ModelConfig c = lora_test_config();
  CausalLM m(c, kF32), twin(c, kF32), other(c, kF32);
  for (auto* x : {&m, &twin, &other}) init_weights(**x, 1);
  at::Tensor before = logits_of(*m);
  LoraOptions o;
  o.r = 4;
  LoraModel lora = apply_lora(*m, o, 11), same = apply_lora(*twin, o, 11), diff = apply_lora(*other, o, 12);
  for (const auto& p : m->parameters()) EXPECT_FALSE(p.requires_grad());
  // Layer 0: 4 attention + 2 expert sites; layer 1: 4 attention + 3 dense MLP sites.
  ASSERT_EQ(lora.sites.size(), 13u);
  EXPECT_EQ(lora.options.target_parameters, (std::vector<std::string>{"gate_up_proj", "down_proj"}));
  for (size_t i = 0; i < lora.sites.size(); ++i) {
    LoraSite& s = lora.sites[i];
    SCOPED_TRACE(s.module_path + " " + s.parameter);
    EXPECT_TRUE(s.A().requires_grad() && s.A().is_leaf());
    EXPECT_TRUE(s.B().requires_grad() && s.B().is_leaf());
    EXPECT_EQ(s.A().size(-2), 4);
    EXPECT_TRUE(at::equal(s.B(), at::zeros_like(s.B())));
    double bound = 1.0 / std::sqrt(double(s.A().size(-1)));  // kaiming-uniform a=sqrt(5)
    EXPECT_LE(s.A().abs().max().item<double>(), bound);
    EXPECT_GT(s.A().abs().max().item<double>(), 0.5 * bound);
    EXPECT_TRUE(at::equal(s.A(), same.sites[i].A()));
    EXPECT_FALSE(at::equal(s.A(), diff.sites[i].A()));
  }
  EXPECT_TRUE(at::equal(before, logits_of(*m)));  // B = 0
  randomize_adapters(lora);
  EXPECT_FALSE(at::allclose(before, logits_of(*m)));
  lora.detach_from(*m);
  EXPECT_TRUE(lora.sites.empty());
  EXPECT_TRUE(at::equal(before, logits_of(*m)));
  EXPECT_FALSE(m->layer(0)->moe->experts->gate_up_adapter);
  EXPECT_FALSE(m->layer(1)->attention<AttentionImpl>()->q_proj->adapter);

  // On a dense model the default (all) targets keep only what exists.
  CausalLM dense(dense_config(), kF32);
  LoraModel dl = apply_lora(*dense, o, 1);
  EXPECT_TRUE(dl.options.target_parameters.empty());
  EXPECT_EQ(dl.sites.size(), 2u * 7);
  for (auto& s : dl.sites) EXPECT_FALSE(s.experts);
}

TEST(Lora, UnmatchedOrUnknownTargetsAreErrors) {
  CausalLM dense(dense_config(), kF32);
  LoraOptions o;
  LoraOptions::parse_targets("q_proj,experts.down_proj", "--lora-targets", &o);
  expect_error_naming([&] { apply_lora(*dense, o, 1); }, "down_proj");
  ModelConfig all_moe = lora_test_config();
  all_moe.mlp_only_layers.clear();
  CausalLM moe(all_moe, kF32);
  LoraOptions g;
  LoraOptions::parse_targets("gate_proj", "--lora-targets", &g);
  expect_error_naming([&] { apply_lora(*moe, g, 1); }, "gate_proj");
  LoraOptions u;
  expect_error_naming([&] { LoraOptions::parse_targets("q_proj,lm_head", "--lora-targets", &u); }, "lm_head");
  expect_error_naming([&] { LoraOptions::parse_targets(" , ", "--lora-targets", &u); }, "--lora-targets");
  LoraOptions bad;
  bad.r = 0;
  expect_error_naming([&] { bad.validate("lora.toml"); }, "lora.toml");
  bad.r = 2;
  bad.alpha = -1;
  expect_error_naming([&] { bad.validate("lora.toml"); }, "alpha");
  // targets_string is the inverse of parse_targets.
  LoraOptions p, q;
  LoraOptions::parse_targets("v_proj,experts.gate_up_proj,o_proj", "t", &p);
  LoraOptions::parse_targets(p.targets_string(), "t", &q);
  EXPECT_EQ(p.target_modules, q.target_modules);
  EXPECT_EQ(p.target_parameters, q.target_parameters);
  EXPECT_EQ(p.target_modules, (std::vector<std::string>{"v_proj", "o_proj"}));
}

TEST(Lora, LinearLoraWithRsLoraMatchesMergedWeightAndFiniteDifferences) {
  at::manual_seed(33);
  ModelConfig c = dense_config();  // no routing: gradients are smooth everywhere
  CausalLM m(c, kF64);
  init_weights(*m, 5);
  LoraOptions o;
  LoraOptions::parse_targets("q_proj,o_proj,up_proj,down_proj", "t", &o);
  o.r = 3;
  o.alpha = 5;
  o.use_rslora = true;
  o.dtype = at::kDouble;
  LoraModel lora = apply_lora(*m, o, 4);
  randomize_adapters(lora, 0.3);
  const double scale = 5.0 / std::sqrt(3.0);
  for (Linear lin : {m->layer(0)->attention<AttentionImpl>()->q_proj, m->layer(1)->dense_mlp->down_proj}) {
    auto ad = std::dynamic_pointer_cast<LoraLinear>(lin->adapter);
    ASSERT_TRUE(ad);
    at::Tensor x = at::randn({2, 3, lin->in_features()}, at::kDouble);
    at::Tensor merged = lin->weight + scale * at::mm(ad->B, ad->A);  // [out, in]
    at::NoGradGuard ng;
    EXPECT_TRUE(at::allclose(lin->forward(x), at::matmul(x, merged.t()), 1e-12, 1e-12));
  }
  at::Tensor ids = at::tensor({2, 5, 7, 11, 13, 17}, at::kLong).view({1, 6});
  at::Tensor pos = at::arange(6, at::kLong).view({1, 6}), seg = at::zeros({1, 6}, at::kLong);
  auto f = [&] { return token_cross_entropy(*m, m->forward(ids, pos, seg).hidden, ids).sum(); };
  for (auto& s : lora.sites) {
    EXPECT_LT(fd_check(f, s.A(), 8), 1e-6) << s.module_path << ".lora_A";
    EXPECT_LT(fd_check(f, s.B(), 8), 1e-6) << s.module_path << ".lora_B";
  }
}

}  // namespace
}  // namespace glint
