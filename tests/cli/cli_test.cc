// End-to-end checks of the glint binary: it runs the way users run it, and bad input
// gets a clear error, a non-zero exit and no crash.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;

using glint::testing::run_glint;
using glint::testing::RunResult;

std::string cli_dir(const std::string& name) { return glint::testing::fresh_temp_dir("cli_" + name); }

using glint::testing::write_file;

std::string tiny_config_json(int vocab = 32) {
  nlohmann::json c = {{"model_type", "qwen3_moe"}, {"vocab_size", vocab}, {"hidden_size", 16},
                      {"intermediate_size", 32},   {"moe_intermediate_size", 8},
                      {"num_hidden_layers", 2},    {"num_attention_heads", 2},
                      {"num_key_value_heads", 1},  {"head_dim", 8},
                      {"num_experts", 4},          {"num_experts_per_tok", 2},
                      {"mlp_only_layers", {1}}};
  return c.dump();
}

// Writes a random tiny model through `glint init-model`.
std::string make_model(const std::string& name) {
  std::string d = cli_dir(name);
  write_file(d + "/config.json", tiny_config_json());
  RunResult r = run_glint("init-model --config " + d + "/config.json --output " + d + "/model --seed 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return d + "/model";
}

TEST(Cli, HelpAndUnknownFlag) {
  EXPECT_EQ(run_glint("--help").exit_code, 0);
  RunResult r = run_glint("train --no-such-flag");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no-such-flag"), std::string::npos) << r.output;
}

TEST(Cli, TrainsLoraOnAModelDirectoryAndWritesEverything) {
  std::string model = make_model("train_model");
  std::string d = cli_dir("train_run");
  std::ostringstream data;
  for (int i = 0; i < 8; ++i)
    data << R"({"input_ids":[1,2,3,4,5,6,7,8],"labels":[-100,-100,-100,-100,5,6,7,8]})" << "\n";
  write_file(d + "/data.jsonl", data.str());
  RunResult r = run_glint("train --model " + model + " --data " + d + "/data.jsonl --output " + d +
                          "/out --steps 3 --batch-size 4 --micro-batch-size 2 --seq-len 8 --lr 1e-2 "
                          "--lora-r 4 --lora-alpha 8 --lora-targets q_proj,v_proj,experts.down_proj");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"/out/metrics.jsonl", "/out/config.toml", "/out/adapter/adapter_config.json",
                        "/out/adapter/adapter_model.safetensors"})
    EXPECT_TRUE(fs::exists(d + f)) << f;
  std::ifstream m(d + "/out/metrics.jsonl");
  std::string line;
  int steps = 0;
  while (std::getline(m, line)) {
    auto j = nlohmann::json::parse(line);
    ++steps;
    EXPECT_EQ(j["step"], steps);
    for (const char* k : {"loss", "grad_norm", "lr", "tokens", "tokens_per_s", "peak_rss_mb"})
      EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_EQ(j["tokens"], 32);  // 4 sequences of 8 tokens
  }
  EXPECT_EQ(steps, 3);
  auto cfg = nlohmann::json::parse(std::ifstream(d + "/out/adapter/adapter_config.json"));
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_EQ(cfg["target_modules"], nlohmann::json({"q_proj", "v_proj"}));
  // The resolved config re-runs the same job.
  RunResult again = run_glint("train --config " + d + "/out/config.toml --output " + d + "/out2");
  EXPECT_EQ(again.exit_code, 0) << again.output;
}

TEST(Cli, BadDataIsAnErrorNamingFileAndLine) {
  std::string model = make_model("bad_data_model");
  std::string d = cli_dir("bad_data");
  const std::pair<std::string, std::string> cases[] = {
      {"{\"input_ids\":[1,2,3]}\n{not json\n", "bad.jsonl:2"},
      {"{\"input_ids\":[1,2,3],\"labels\":[1,2]}\n", "bad.jsonl:1"},
      {"{\"input_ids\":[1,2,99]}\n", "99"},
  };
  for (const auto& [text, expect] : cases) {
    write_file(d + "/bad.jsonl", text);
    RunResult r = run_glint("train --model " + model + " --data " + d + "/bad.jsonl --output " + d +
                            "/out --steps 1 --batch-size 1 --seq-len 8");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << r.output;
  }
}

// `init-model --tiny FAMILY`: every registered family's tiny model, written and trained
// on for a step; a wrong family or both sources are errors naming the problem.
TEST(Cli, InitModelWritesEachFamilysTinyModel) {
  const std::string d = glint::testing::fresh_temp_dir("cli_tiny");
  write_file(d + "/data.jsonl", "{\"input_ids\": [1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 2, 6, 10, 14, 18, 22, 26]}\n"
                                "{\"input_ids\": [3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47, 4, 8, 12, 16, 20, 24, 28]}\n");
  for (const char* family : {"qwen3", "deepseek_v3", "qwen3_5", "deepseek_v4", "qwen3_next", "glm4_moe", "gpt_oss"}) {
    const std::string model = d + "/" + family;
    RunResult r = run_glint(std::string("init-model --tiny ") + family + " --vocab-size 48 --output " + model);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(model + "/config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    EXPECT_EQ(cfg["vocab_size"], 48) << family;
    RunResult t = run_glint("train --model " + model + " --data " + d + "/data.jsonl --steps 1 --batch-size 2 "
                            "--eval-samples 0 --output " + model + "_run");
    EXPECT_EQ(t.exit_code, 0) << family << ": " << t.output;
  }
  RunResult bad = run_glint("init-model --tiny qwen4 --output " + d + "/bad");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("no model family is named 'qwen4' (families: qwen3, "), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(d + "/bad"));
  RunResult both = run_glint("init-model --tiny qwen3 --config x.json --output " + d + "/both");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.output.find("excludes"), std::string::npos) << both.output;
  RunResult none = run_glint("init-model --output " + d + "/none");
  EXPECT_NE(none.output.find("give --config FILE or --tiny FAMILY"), std::string::npos) << none.output;
}

TEST(Cli, BadModelDirectoryIsAnError) {
  std::string model = make_model("bad_model");
  std::string d = cli_dir("bad_model_data");
  write_file(d + "/data.jsonl", "{\"input_ids\":[1,2,3]}\n");
  auto train = [&](const std::string& m) {
    return run_glint("train --model " + m + " --data " + d + "/data.jsonl --output " + d +
                     "/out --steps 1 --batch-size 1 --seq-len 8");
  };
  // Truncated weights file.
  std::string st = model + "/model.safetensors";
  auto size = fs::file_size(st);
  fs::resize_file(st, size / 2);
  RunResult r = train(model);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
  // config.json without a required field.
  auto cfg = nlohmann::json::parse(tiny_config_json());
  cfg.erase("hidden_size");
  write_file(model + "/config.json", cfg.dump());
  r = train(model);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("hidden_size"), std::string::npos) << r.output;
  // Not a directory at all: found before anything is read (a usage error).
  r = train(d + "/nowhere");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("nowhere"), std::string::npos) << r.output;
}

TEST(Cli, BadFlagValuesAreErrors) {
  // Usage errors: exit status 2.
  RunResult r = run_glint("train --steps 0 --output " + cli_dir("bad_flags"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--steps"), std::string::npos) << r.output;
  r = run_glint("train --lora-targets q_proj,nonsense --output " + cli_dir("bad_flags2"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("nonsense"), std::string::npos) << r.output;
}

}  // namespace

namespace {

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return out;
}

// The built-in job fills in its own defaults (steps, learning rate); its config.toml
// must record them so that --config repeats the run exactly.
TEST(Cli, ResolvedConfigRepeatsTheBuiltInRun) {
  std::string d = cli_dir("resolved");
  RunResult a = run_glint("train --steps 4 --eval-samples 0 --output " + d + "/a");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  RunResult b = run_glint("train --config " + d + "/a/config.toml --output " + d + "/b");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  auto la = losses(d + "/a/metrics.jsonl"), lb = losses(d + "/b/metrics.jsonl");
  ASSERT_EQ(la.size(), 4u);
  EXPECT_EQ(la, lb);
}

}  // namespace
