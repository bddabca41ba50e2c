// Multi-tenant LoRA training: tenant a, trained in shared micro-batches beside tenant b
// (different rank, alpha, targets and schedule), equals a trained alone on the same
// samples with the single-adapter path (per-step loss, gradient norm, every gradient, the
// saved adapter), on 1 process and on 4 ranks with expert parallelism; b, whose single
// step is the first, is untouched by the steps without its sequences.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "io/safetensors.h"
#include "test_util.h"
#include "train/trainer.h"

namespace glint {
namespace {

std::vector<nlohmann::json> metrics(const std::string& path) { return glint::testing::read_jsonl(path); }

// Random pre-tokenized sequences of 4..12 ids < 16.
void write_data(const std::string& path, uint32_t seed) {
  std::mt19937 rng(seed);
  std::ofstream out(path);
  for (int i = 0; i < 40; ++i) {
    nlohmann::json ids = nlohmann::json::array();
    int n = 4 + int(rng() % 9);
    for (int k = 0; k < n; ++k) ids.push_back(int(rng() % 16));
    out << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
  }
}

double norm_rel_err(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).norm().item<double>() / std::max(1e-12, a.norm().item<double>());
}

void expect_same_tensors(const std::string& want_file, const std::string& got_file) {
  SafetensorsFile want(want_file), got(got_file);
  ASSERT_EQ(got.keys(), want.keys()) << got_file;
  ASSERT_FALSE(want.keys().empty());
  for (const auto& k : want.keys()) EXPECT_LT(norm_rel_err(want.read(k), got.read(k)), 1e-5) << got_file << " " << k;
}

struct TenantRun {
  std::string dir, common;
};

TenantRun make_setup(const std::string& name) {
  TenantRun s;
  s.dir = testing::fresh_temp_dir("tenants_" + name);
  nlohmann::json cfg = {{"model_type", "qwen3_moe"}, {"vocab_size", 16}, {"hidden_size", 32},
                        {"intermediate_size", 48},   {"moe_intermediate_size", 16}, {"num_hidden_layers", 2},
                        {"num_attention_heads", 4},  {"num_key_value_heads", 2},    {"head_dim", 8},
                        {"num_experts", 8},          {"num_experts_per_tok", 2},    {"mlp_only_layers", {1}},
                        {"initializer_range", 0.1}};
  std::ofstream(s.dir + "/config.json") << cfg.dump();
  int code;
  std::string out = testing::run_command(std::string(GLINT_BINARY) + " init-model --config " + s.dir +
                                             "/config.json --output " + s.dir + "/model --seed 3",
                                         &code);
  EXPECT_EQ(code, 0) << out;
  write_data(s.dir + "/a.jsonl", 1);
  write_data(s.dir + "/b.jsonl", 2);
  s.common = " --model " + s.dir + "/model --steps 3 --batch-size 4 --micro-batch-size 1 --seq-len 16 --lr 1e-2"
             " --seed 5 --warmup-steps 1 --adam-eps 1e-6 --max-grad-norm 0.5";
  return s;
}

TEST(TenantTraining, MixedBatchesEqualEachTenantTrainedAlone) {
  TenantRun s = make_setup("mixed");
  const std::string glint = GLINT_BINARY;
  int code;
  // Alone: a for 3 steps; b for its 1 step.
  std::string out = testing::run_command(glint + " train" + s.common + " --data " + s.dir +
                                             "/a.jsonl --lora-r 4 --lora-alpha 8 --output " + s.dir +
                                             "/alone_a --dump-gradients " + s.dir + "/alone_a/grads",
                                         &code);
  ASSERT_EQ(code, 0) << out;
  out = testing::run_command(glint + " train" + s.common + " --data " + s.dir +
                                 "/b.jsonl --lora-r 8 --lora-alpha 16 --lora-targets q_proj,experts.down_proj"
                                 " --steps 1 --output " + s.dir + "/alone_b",
                             &code);
  ASSERT_EQ(code, 0) << out;
  const std::string tenants = " --tenant name=a,r=4,alpha=8,data=" + s.dir +
                              "/a.jsonl --tenant name=b,r=8,alpha=16,steps=1,targets=q_proj+experts.down_proj,data=" +
                              s.dir + "/b.jsonl";
  auto base = metrics(s.dir + "/alone_a/metrics.jsonl");
  ASSERT_EQ(base.size(), 3u);
  for (const auto& [ranks, flags] : std::vector<std::pair<int, std::string>>{{1, ""}, {4, " --ep 2 --fsdp"}}) {
    SCOPED_TRACE("W=" + std::to_string(ranks) + flags);
    std::string run_dir = s.dir + "/mixed" + std::to_string(ranks);
    std::string cmd = glint + " train" + s.common + tenants + flags + " --output " + run_dir + " --dump-gradients " +
                      run_dir + "/grads";
    if (ranks > 1) cmd = "GLINT_DIST_TIMEOUT_SECONDS=60 " + glint + " launch -n " + std::to_string(ranks) + " -- " + cmd;
    out = testing::run_command(cmd, &code);
    ASSERT_EQ(code, 0) << out;
    auto m = metrics(run_dir + "/a/metrics.jsonl");
    ASSERT_EQ(m.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(m[k]["label_tokens"], base[k]["label_tokens"]);
      for (const char* key : {"loss", "grad_norm", "lr"})
        EXPECT_NEAR(m[k][key].get<double>(), base[k][key].get<double>(), 1e-5 * std::abs(base[k][key].get<double>()))
            << key << " step " << k + 1;
      std::string step = "/step_" + std::to_string(k + 1) + ".safetensors";
      expect_same_tensors(s.dir + "/alone_a/grads" + step, run_dir + "/grads/a" + step);
    }
    EXPECT_GT(base[0]["grad_norm"].get<double>(), 0.5);  // clipping was active
    expect_same_tensors(s.dir + "/alone_a/adapter/adapter_model.safetensors",
                        run_dir + "/a/adapter/adapter_model.safetensors");
    EXPECT_EQ(metrics(run_dir + "/b/metrics.jsonl").size(), 1u);
    expect_same_tensors(s.dir + "/alone_b/adapter/adapter_model.safetensors",
                        run_dir + "/b/adapter/adapter_model.safetensors");
    // The tenant's adapter_config.json is the single-adapter run's.
    auto cfg = [](const std::string& f) { return nlohmann::json::parse(std::ifstream(f)); };
    EXPECT_EQ(cfg(run_dir + "/b/adapter/adapter_config.json"), cfg(s.dir + "/alone_b/adapter/adapter_config.json"));
  }
}

// In one process, through the Trainer: steps without b's sequences leave b's adapter bit
// for bit as it was.
// One step core: a single-adapter run and the same adapter as the only tenant of a bank
// are the same computation. In float64 their losses, gradient norms, learning rates, every
// dumped gradient and the saved adapter agree to 1e-12, on 1 process and on 2 ranks with
// expert parallelism.
TEST(TenantTraining, ASingleAdapterRunIsItsOneTenantBankInFloat64) {
  TenantRun s = make_setup("one_tenant");
  const std::string glint = GLINT_BINARY;
  const std::string lora = " --lora-r 4 --lora-alpha 8 --lora-targets q_proj,o_proj,experts.gate_up_proj,down_proj";
  for (const auto& [ranks, flags] : std::vector<std::pair<int, std::string>>{{1, ""}, {2, " --ep 2"}}) {
    SCOPED_TRACE("W=" + std::to_string(ranks) + flags);
    const std::string single = s.dir + "/single" + std::to_string(ranks), bank = s.dir + "/bank" + std::to_string(ranks);
    const std::string common = " train" + s.common + " --dtype float64" + flags;
    const int W = ranks;  // (a lambda cannot capture a structured binding in C++17)
    auto launch = [&](const std::string& args) {
      std::string cmd = glint + args;
      if (W > 1) cmd = "GLINT_DIST_TIMEOUT_SECONDS=60 " + glint + " launch -n " + std::to_string(W) + " -- " + cmd;
      int code;
      std::string out = testing::run_command(cmd, &code);
      EXPECT_EQ(code, 0) << out;
      return code == 0;
    };
    ASSERT_TRUE(launch(common + lora + " --data " + s.dir + "/a.jsonl --output " + single + " --dump-gradients " +
                       single + "/grads"));
    ASSERT_TRUE(launch(common + " --tenant name=a,r=4,alpha=8,targets=q_proj+o_proj+experts.gate_up_proj+down_proj,data=" +
                       s.dir + "/a.jsonl --output " + bank + " --dump-gradients " + bank + "/grads"));
    auto want = metrics(single + "/metrics.jsonl"), got = metrics(bank + "/a/metrics.jsonl");
    ASSERT_EQ(want.size(), 3u);
    ASSERT_EQ(got.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(got[k]["label_tokens"], want[k]["label_tokens"]);
      for (const char* key : {"loss", "grad_norm", "lr"})
        EXPECT_NEAR(got[k][key].get<double>(), want[k][key].get<double>(), 1e-12 * std::abs(want[k][key].get<double>()))
            << key << " step " << k + 1;
      const std::string step = "/step_" + std::to_string(k + 1) + ".safetensors";
      SafetensorsFile g_want(single + "/grads" + step), g_got(bank + "/grads/a" + step);
      ASSERT_EQ(g_got.keys(), g_want.keys());
      for (const auto& key : g_want.keys()) {
        at::Tensor a = g_want.read(key), b = g_got.read(key);
        ASSERT_EQ(a.scalar_type(), at::kDouble) << key;
        EXPECT_LE((a - b).abs().max().item<double>(), 1e-12 * std::max(1.0, a.abs().max().item<double>()))
            << key << " step " << k + 1;
      }
    }
    SafetensorsFile a_want(single + "/adapter/adapter_model.safetensors"),
        a_got(bank + "/a/adapter/adapter_model.safetensors");
    ASSERT_EQ(a_got.keys(), a_want.keys());
    for (const auto& key : a_want.keys())
      EXPECT_LE((a_want.read(key) - a_got.read(key)).abs().max().item<double>(), 1e-12) << key;
  }
}

TEST(TenantTraining, ATenantWithoutSequencesIsUntouched) {
  TenantRun s = make_setup("untouched");
  TrainOptions o;
  o.model.dir = s.dir + "/model";
  o.optim.steps = 3;
  o.optim.batch_size = 2;
  o.data.seq_len = 16;
  o.optim.lr = 1e-2;
  o.run.output = s.dir + "/out";
  o.tenants.push_back(TenantSpec::parse("name=a,r=4,data=" + s.dir + "/a.jsonl", o));
  o.tenants.push_back(TenantSpec::parse("name=b,r=2,steps=1,data=" + s.dir + "/b.jsonl", o));
  Trainer t(o);
  std::vector<at::Tensor> initial;
  for (auto& p : t.trainable_parameters()) initial.push_back(p.detach().clone());
  StepStats first = t.step(t.next_micro_batches());
  ASSERT_EQ(first.tenants.size(), 2u);
  std::vector<at::Tensor> b_after_first;
  for (auto& p : t.trainable_parameters()) b_after_first.push_back(p.detach().clone());
  for (int k = 0; k < 2; ++k) {
    StepStats st = t.step(t.next_micro_batches());
    ASSERT_EQ(st.tenants.size(), 1u);
    EXPECT_EQ(st.tenants[0].name, "a");
  }
  // trainable_parameters(): a's tensors, then b's (both target every module: halves).
  auto now = t.trainable_parameters();
  ASSERT_EQ(now.size() % 2, 0u);
  const size_t half = now.size() / 2;
  bool a_changed = false;
  for (size_t i = 0; i < half; ++i) a_changed |= !at::equal(now[i], b_after_first[i]);
  EXPECT_TRUE(a_changed);
  // b trained in its step (its B moved off zero), then not again.
  bool b_trained = false;
  for (size_t i = half; i < now.size(); ++i) b_trained |= !at::equal(b_after_first[i], initial[i]);
  EXPECT_TRUE(b_trained);
  for (size_t i = half; i < now.size(); ++i) EXPECT_TRUE(at::equal(now[i], b_after_first[i])) << "b tensor " << i - half;
}

// Tenants from a TOML --config list; the resolved OUT/config.toml repeats the run.
TEST(TenantTraining, TenantListInAConfigFile) {
  TenantRun s = make_setup("toml");
  std::string cfg = s.dir + "/run.toml";
  std::ofstream(cfg) << "model = \"" << s.dir << "/model\"\nsteps = 2\nbatch-size = 2\nseq-len = 16\n"
                     << "tenant = [\"name=a,r=4,data=" << s.dir << "/a.jsonl\", \"name=b,r=2,lr=0.001,data=" << s.dir
                     << "/b.jsonl\"]\n";
  int code;
  std::string out = testing::run_command(std::string(GLINT_BINARY) + " train --config " + cfg + " --output " +
                                             s.dir + "/out",
                                         &code);
  ASSERT_EQ(code, 0) << out;
  for (const char* t : {"a", "b"}) {
    EXPECT_EQ(metrics(s.dir + "/out/" + t + "/metrics.jsonl").size(), 2u) << t;
    EXPECT_TRUE(std::filesystem::exists(s.dir + "/out/" + t + "/adapter/adapter_model.safetensors")) << t;
  }
  EXPECT_EQ(metrics(s.dir + "/out/b/metrics.jsonl")[0]["lr"].get<double>(), 0.001);
  out = testing::run_command(std::string(GLINT_BINARY) + " train --config " + s.dir + "/out/config.toml --output " +
                                 s.dir + "/again",
                             &code);
  ASSERT_EQ(code, 0) << out;
  auto first = metrics(s.dir + "/out/a/metrics.jsonl"), again = metrics(s.dir + "/again/a/metrics.jsonl");
  ASSERT_EQ(first.size(), again.size());
  for (size_t k = 0; k < first.size(); ++k) EXPECT_EQ(first[k]["loss"], again[k]["loss"]);
}

TEST(TenantTraining, BadTenantSpecsAreErrors) {
  TrainOptions d;
  auto err = [&](const std::string& spec) { return testing::error_message([&] { TenantSpec::parse(spec, d); }); };
  EXPECT_NE(err("r=4,data=x.jsonl").find("name= is required"), std::string::npos);
  EXPECT_NE(err("name=a").find("data= is required"), std::string::npos);
  EXPECT_NE(err("name=a,data=x,r=four").find("r=four is not a number"), std::string::npos);
  EXPECT_NE(err("name=a,data=x,color=red").find("unknown key 'color'"), std::string::npos);
  EXPECT_NE(err("name=a,data=x,targets=q_proj+wings").find("wings"), std::string::npos);
  EXPECT_NE(err("name=a,data=x,oops").find("'oops' is not key=value"), std::string::npos);
  // Options that do not combine with tenants.
  TrainOptions o;
  o.tenants.push_back(TenantSpec::parse("name=a,data=x.jsonl", o));
  o.full = true;
  EXPECT_NE(testing::error_message([&] { o.validate(); }).find("does not go with --full"), std::string::npos);
  o.full = false;
  o.data.path = "y.jsonl";
  EXPECT_NE(testing::error_message([&] { o.validate(); }).find("--data and --tenant do not go together"),
            std::string::npos);
}

}  // namespace
}  // namespace glint
