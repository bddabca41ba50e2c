// `glint train` as a user meets it: the run directory is never a previous run's, the
// sequence length and what it cuts are reported, progress says where the run is.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/fs.h"
#include "test_util.h"

namespace {

using glint::read_file;

namespace fs = std::filesystem;

// glint's output; *code its exit status.
std::string glint(const std::string& args, int* code, const std::string& cwd = "") {
  glint::testing::RunResult r = glint::testing::run_glint(args, cwd);
  *code = r.exit_code;
  return r.output;
}


const char* kQuick = "train --steps 2 --eval-samples 0 --batch-size 4";

TEST(TrainRun, AnExistingRunDirectoryIsRefusedUnlessOverwrite) {
  std::string d = glint::testing::fresh_temp_dir("run_refuse");
  int code;
  std::string out = glint(std::string(kQuick) + " --output " + d + "/out", &code);
  ASSERT_EQ(code, 0) << out;
  const std::string metrics = read_file(d + "/out/metrics.jsonl"), adapter = read_file(d + "/out/adapter/adapter_model.safetensors");
  ASSERT_FALSE(metrics.empty());
  // The same command again: refused before anything is written, the run left as it was.
  out = glint(std::string(kQuick) + " --steps 3 --output " + d + "/out", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("already holds a run"), std::string::npos) << out;
  EXPECT_NE(out.find("metrics.jsonl"), std::string::npos) << out;
  EXPECT_EQ(read_file(d + "/out/metrics.jsonl"), metrics);
  EXPECT_EQ(read_file(d + "/out/adapter/adapter_model.safetensors"), adapter);
  // A file is not a directory.
  std::ofstream(d + "/file") << "x";
  out = glint(std::string(kQuick) + " --output " + d + "/file", &code);
  EXPECT_EQ(code, 2) << out;
  // --overwrite writes over it.
  out = glint(std::string(kQuick) + " --steps 3 --overwrite --output " + d + "/out", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(glint::testing::read_jsonl(d + "/out/metrics.jsonl").size(), 3u);
}

// Without --output every run gets a new directory under runs/, and OUT/config.toml
// repeats the run into a new one (it records the output only as a comment).
TEST(TrainRun, EachRunGetsANewDirectoryAndConfigRepeatsIntoAnother) {
  std::string cwd = glint::testing::fresh_temp_dir("run_default");
  int code;
  for (int i = 0; i < 2; ++i) {
    std::string out = glint(kQuick, &code, cwd);
    ASSERT_EQ(code, 0) << out;
  }
  std::vector<std::string> runs;
  for (const auto& e : fs::directory_iterator(cwd + "/runs")) runs.push_back(e.path().string());
  ASSERT_EQ(runs.size(), 2u);
  std::sort(runs.begin(), runs.end());
  std::string config = read_file(runs[0] + "/config.toml");
  EXPECT_EQ(config.find("\noutput="), std::string::npos) << config;
  EXPECT_NE(config.find("# glint train, written to runs/"), std::string::npos) << config;
  std::string out = glint("train --config " + runs[0] + "/config.toml", &code, cwd);
  ASSERT_EQ(code, 0) << out;
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(cwd + "/runs")) n += e.is_directory();
  EXPECT_EQ(n, 3u);
  // The repeat trained the same steps.
  std::vector<std::string> now;
  for (const auto& e : fs::directory_iterator(cwd + "/runs")) now.push_back(e.path().string());
  std::sort(now.begin(), now.end());
  auto a = glint::testing::read_jsonl(runs[0] + "/metrics.jsonl");
  for (const auto& r : now) {
    if (r == runs[0] || r == runs[1]) continue;
    auto b = glint::testing::read_jsonl(r + "/metrics.jsonl");
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"], b[i]["loss"]);
  }
}

TEST(TrainRun, ProgressSaysTimeEpochsAndWhatTheNumbersAre) {
  std::string d = glint::testing::fresh_temp_dir("run_progress");
  int code;
  std::string out = glint("train --steps 3 --eval-samples 0 --batch-size 4 --log-every 10 --output " + d + "/out", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("one epoch = 20,000 samples"), std::string::npos) << out;
  EXPECT_NE(out.find("means over the steps since the previous line"), std::string::npos) << out;
  EXPECT_NE(out.find("step 1/3"), std::string::npos) << out;  // the first step has a line at once
  EXPECT_NE(out.find("elapsed"), std::string::npos) << out;
  EXPECT_NE(out.find("left"), std::string::npos) << out;
  EXPECT_NE(out.find("estimated peak"), std::string::npos) << out;
  auto recs = glint::testing::read_jsonl(d + "/out/metrics.jsonl");
  ASSERT_EQ(recs.size(), 3u);
  for (const auto& r : recs)
    for (const char* k : {"time", "elapsed_s", "epoch"}) EXPECT_TRUE(r.contains(k)) << k;
  EXPECT_DOUBLE_EQ(recs[2]["epoch"].get<double>(), 3.0 * 4 / 20000);
  EXPECT_GT(recs[2]["time"].get<double>(), 1.7e9);  // seconds since 1970
}

// A model directory with the fixture tokenizer and a ChatML template.
std::string text_model(const std::string& name) {
  std::string d = glint::testing::fresh_temp_dir("run_" + name);
  nlohmann::json c = {{"model_type", "qwen3_moe"}, {"vocab_size", 300}, {"hidden_size", 16},
                      {"intermediate_size", 32},   {"moe_intermediate_size", 8},
                      {"num_hidden_layers", 2},    {"num_attention_heads", 2},
                      {"num_key_value_heads", 1},  {"head_dim", 8},
                      {"num_experts", 4},          {"num_experts_per_tok", 2}};
  std::ofstream(d + "/config.json") << c.dump();
  int code;
  std::string out = glint("init-model --config " + d + "/config.json --output " + d + "/model --seed 1", &code);
  EXPECT_EQ(code, 0) << out;
  fs::copy_file(std::string(GLINT_TEST_DATA_DIR) + "/tokenizer_fixture/tokenizer.json", d + "/model/tokenizer.json");
  nlohmann::json tc = {{"eos_token", "<|im_end|>"},
                       {"chat_template",
                        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}};
  std::ofstream(d + "/model/tokenizer_config.json") << tc.dump();
  return d;
}

TEST(TrainRun, SequenceLengthIsAutomaticAndEveryCutIsReported) {
  std::string d = text_model("seq_len");
  std::string long_prompt;
  for (int i = 0; i < 30; ++i) long_prompt += "hello world ";
  std::ofstream(d + "/data.jsonl")
      << R"({"messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"cat world"}]})" << "\n"
      << R"({"messages":[{"role":"user","content":")" << long_prompt
      << R"("},{"role":"assistant","content":"cat"}]})" << "\n"
      << R"({"prompt":"hello","completion":" world cat"})" << "\n";
  const std::string base = "train --model " + d + "/model --data " + d + "/data.jsonl --steps 2 --batch-size 2 ";
  int code;
  // Automatic: the longest sample, nothing cut.
  std::string out = glint(base + "--output " + d + "/auto", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("(automatic: the longest sample"), std::string::npos) << out;
  EXPECT_NE(out.find("data.jsonl:2"), std::string::npos) << out;  // where the longest is
  EXPECT_EQ(out.find("cut to"), std::string::npos) << out;
  // A short --seq-len cuts: counted, and the chat that lost its answer named by line.
  out = glint(base + "--seq-len 32 --output " + d + "/short", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("1 cut to 32 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("warning: 1 sample lost every trained token"), std::string::npos) << out;
  EXPECT_NE(out.find("data.jsonl line 2"), std::string::npos) << out;
  // data preview applies the same automatic length.
  out = glint("data preview --model " + d + "/model --data " + d + "/data.jsonl --count 1", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("(automatic: the longest sample"), std::string::npos) << out;
  // --full writes a whole model directory: weights, config and the tokenizer.
  out = glint(base + "--full --output " + d + "/full", &code);
  ASSERT_EQ(code, 0) << out;
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_TRUE(fs::exists(d + "/full/model/" + f)) << f;
}

}  // namespace

namespace {

// Multi-tenant runs print one line per tenant under the run's line, each with the
// tenant's own step, loss, gradient norm, learning rate and epoch.
TEST(TrainRun, TenantRunsPrintOneLinePerTenant) {
  std::string d = glint::testing::fresh_temp_dir("run_tenants");
  std::ofstream data(d + "/ids.jsonl");
  for (int i = 0; i < 6; ++i)
    data << R"({"input_ids":[1,2,3,4,5,6,7,8],"labels":[-100,-100,-100,-100,5,6,7,8]})" << "\n";
  data.close();
  int code;
  std::string out = glint("train --steps 2 --batch-size 2 --log-every 1 --tenant name=alpha,r=4,data=" + d +
                              "/ids.jsonl --tenant name=beta,r=8,steps=1,data=" + d + "/ids.jsonl --output " + d +
                              "/out",
                          &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("loss (all tenants)"), std::string::npos) << out;
  EXPECT_NE(out.find("  tenant alpha  step 1  loss "), std::string::npos) << out;
  EXPECT_NE(out.find("  tenant beta  step 1  loss "), std::string::npos) << out;
  EXPECT_NE(out.find("  tenant alpha  step 2  loss "), std::string::npos) << out;
  EXPECT_EQ(out.find("  tenant beta  step 2"), std::string::npos) << out;  // beta trains one step
  EXPECT_NE(out.find("tenant alpha: one epoch = 6 samples"), std::string::npos) << out;
  auto recs = glint::testing::read_jsonl(d + "/out/alpha/metrics.jsonl");
  ASSERT_EQ(recs.size(), 2u);
  for (const char* k : {"epoch", "time", "elapsed_s"}) EXPECT_TRUE(recs[1].contains(k)) << k;
}

}  // namespace
