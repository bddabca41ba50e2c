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

// The automatic sequence length covers the validation data too: nothing is cut unless
// --seq-len asks.
TEST(TrainRun, TheAutomaticSequenceLengthCoversTheValidationData) {
  std::string d = text_model("eval_len");
  std::string long_answer;
  for (int i = 0; i < 40; ++i) long_answer += "world cat ";
  std::ofstream(d + "/train.jsonl") << R"({"prompt":"hello","completion":" world cat"})" << "\n"
                                    << R"({"prompt":"cat","completion":" hello"})" << "\n";
  std::ofstream(d + "/val.jsonl") << R"({"prompt":"hello","completion":")" << long_answer << R"("})" << "\n";
  int code;
  std::string out = glint("train --model " + d + "/model --data " + d + "/train.jsonl --eval-data " + d +
                              "/val.jsonl --steps 1 --batch-size 2 --output " + d + "/out",
                          &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("val.jsonl:1"), std::string::npos) << out;  // the longest sample is the validation one
  EXPECT_EQ(out.find("cut to"), std::string::npos) << out;
  EXPECT_EQ(out.find("lost"), std::string::npos) << out;
}

// A plan that cannot fit the memory budget is refused before the first step, saying by
// how much and what lowers it; the flag that overrides it starts the run. A run that fails
// before its first step leaves no directory behind, so the same command can run again.
TEST(TrainRun, APlanBeyondTheMemoryBudgetIsRefusedAndLeavesNothing) {
  std::string d = text_model("memory");
  std::string long_text;
  for (int i = 0; i < 30; ++i) long_text += "hello world cat ";
  std::ofstream(d + "/data.jsonl") << R"({"text":")" << long_text << R"("})" << "\n"
                                   << R"({"text":"hello"})" << "\n";
  const std::string cmd = "train --model " + d + "/model --data " + d + "/data.jsonl --steps 1 --batch-size 2 "
                          "--output " + d + "/out --memory-budget 20M";
  int code;
  std::string out = glint(cmd, &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("exceeds the budget of 20 MB"), std::string::npos) << out;
  EXPECT_NE(out.find("--ignore-memory-estimate"), std::string::npos) << out;
  EXPECT_NE(out.find("--seq-len"), std::string::npos) << out;
  EXPECT_EQ(out.find("internal error"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(d + "/out")) << "a run refused before its first step left its directory";
  // The same command, with the override: it runs into the same directory.
  out = glint(cmd + " --ignore-memory-estimate", &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("warning: the estimated peak memory"), std::string::npos) << out;

  // A failure of another kind before the first step (a bad data line): nothing left either.
  std::ofstream(d + "/bad.jsonl") << R"({"text":"hello"})" << "\n" << "{oops" << "\n";
  out = glint("train --model " + d + "/model --data " + d + "/bad.jsonl --steps 1 --output " + d + "/bad", &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_FALSE(fs::exists(d + "/bad"));
  // What a killed run leaves before its first step (its config and an empty metrics.jsonl)
  // is re-used by a new run, and --resume says there is nothing to continue and how to restart.
  fs::create_directories(d + "/killed");
  std::ofstream(d + "/killed/config.toml") << "steps=1\n";
  std::ofstream(d + "/killed/metrics.jsonl");
  out = glint("train --resume " + d + "/killed", &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("stopped before its first checkpoint"), std::string::npos) << out;
  EXPECT_NE(out.find("--config " + d + "/killed/config.toml --output " + d + "/killed"), std::string::npos) << out;
  out = glint("train --model " + d + "/model --data " + d + "/data.jsonl --steps 1 --batch-size 2 --seq-len 16 "
              "--output " + d + "/killed",
              &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(glint::testing::read_jsonl(d + "/killed/metrics.jsonl").size(), 1u);
}

// On the user's data the default length is in epochs (3), not 1000 steps of the
// built-in task's; --epochs sets it, --steps still wins.
TEST(TrainRun, TheDefaultLengthOnTheUsersDataIsThreeEpochs) {
  std::string d = text_model("epochs");
  std::ofstream data(d + "/data.jsonl");
  for (int i = 0; i < 10; ++i) data << R"({"prompt":"hello","completion":" world cat"})" << "\n";
  data.close();
  const std::string base = "train --model " + d + "/model --data " + d + "/data.jsonl --batch-size 4 ";
  int code;
  std::string out = glint(base + "--output " + d + "/three", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(glint::testing::read_jsonl(d + "/three/metrics.jsonl").size(), 8u);  // ceil(3 x 10 / 4)
  EXPECT_NE(out.find("= 3.2 epochs"), std::string::npos) << out;
  out = glint(base + "--epochs 1 --output " + d + "/one", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(glint::testing::read_jsonl(d + "/one/metrics.jsonl").size(), 3u);
  out = glint(base + "--steps 2 --output " + d + "/two", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(glint::testing::read_jsonl(d + "/two/metrics.jsonl").size(), 2u);
  // The built-in task is endless: --epochs has nothing to count.
  out = glint("train --epochs 2 --output " + d + "/builtin", &code);
  EXPECT_EQ(code, 2) << out;
  // --keep-last counts checkpoints: 0 would keep none, so it is refused; "all" is the default.
  out = glint(base + "--steps 1 --keep-last 0 --output " + d + "/keep0", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("or all"), std::string::npos) << out;
  out = glint(base + "--steps 1 --keep-last all --output " + d + "/keepall", &code);
  EXPECT_EQ(code, 0) << out;
}

// A target the family knows but this model lacks (a dense-MLP name on a model whose
// layers are all MoE) is named as such, and the list offered holds only what this model has.
TEST(TrainRun, ATargetThisModelLacksIsExplainedWithThisModelsTargets) {
  std::string d = text_model("targets");
  std::ofstream(d + "/data.jsonl") << R"({"prompt":"hello","completion":" world cat"})" << "\n";
  int code;
  std::string out = glint("train --model " + d + "/model --data " + d + "/data.jsonl --steps 1 --batch-size 1 "
                          "--lora-targets q_proj,gate_proj --output " + d + "/out",
                          &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("'gate_proj' is a module of qwen3_moe models, but this one has none"), std::string::npos) << out;
  const size_t list = out.find("this model's targets: ");
  ASSERT_NE(list, std::string::npos) << out;
  const std::string targets = out.substr(list, out.find(')', list) - list);
  EXPECT_NE(targets.find("q_proj"), std::string::npos) << targets;
  EXPECT_NE(targets.find("experts.gate_up_proj"), std::string::npos) << targets;
  EXPECT_EQ(targets.find(" gate_proj"), std::string::npos) << targets;
}

// The README's examples stay true: the example config.json makes a model, the example
// --config file trains it.
TEST(TrainRun, TheExampleConfigsMakeAModelAndTrainIt) {
  const std::string examples = std::string(GLINT_TEST_DATA_DIR) + "/../../examples";
  std::string d = glint::testing::fresh_temp_dir("run_examples");
  int code;
  std::string out = glint("init-model --config " + examples + "/tiny-qwen3-moe.json --output " + d + "/model", &code);
  ASSERT_EQ(code, 0) << out;
  fs::copy_file(std::string(GLINT_TEST_DATA_DIR) + "/tokenizer_fixture/tokenizer.json", d + "/model/tokenizer.json");
  std::ofstream(d + "/data.jsonl") << R"({"text":"hello world"})" << "\n";
  out = glint("train --config " + examples + "/lora.toml --model " + d + "/model --data " + d +
                  "/data.jsonl --steps 1 --batch-size 1 --output " + d + "/run",
              &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(fs::exists(d + "/run/adapter/adapter_model.safetensors"));
}

// Usage errors exit 2; hints point the right way.
TEST(TrainRun, UsageErrorsExitTwoAndHintsPointTheRightWay) {
  std::string d = text_model("hints");
  std::ofstream(d + "/data.jsonl") << R"({"prompt":"hello","completion":" world cat"})" << "\n";
  const std::string base = "train --model " + d + "/model --steps 1 --batch-size 1 ";
  int code;
  std::string out = glint(base + "--data " + d + "/data.jsonl --ep 2 --output " + d + "/o1", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--ep (2) must divide the number of ranks (1)"), std::string::npos) << out;
  out = glint(base + "--data " + d + "/data.jsonl --lora-r 0 --output " + d + "/o2", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--lora-r"), std::string::npos) << out;
  out = glint("launch -n 0 -- true", &code);
  EXPECT_EQ(code, 2) << out;
  // --data DIR: a directory, not "0 lines".
  out = glint(base + "--data " + d + " --output " + d + "/o3", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("is a directory"), std::string::npos) << out;
  // --resume of a path that does not exist says so.
  out = glint("train --resume " + d + "/missing", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find(d + "/missing: no such directory"), std::string::npos) << out;
  // A pretty-printed JSON array is not JSONL: said once, for the file.
  std::ofstream(d + "/array.json") << "[\n  {\"text\": \"hello\"},\n  {\"text\": \"world\"}\n]\n";
  out = glint(base + "--data " + d + "/array.json --output " + d + "/o4", &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("a JSON array"), std::string::npos) << out;
  EXPECT_NE(out.find("JSONL"), std::string::npos) << out;
  EXPECT_EQ(out.find("unexpected end of input"), std::string::npos) << out;
  // Chats for a tokenizer without a chat template: skipping lines would not help.
  fs::remove(d + "/model/tokenizer_config.json");
  std::ofstream(d + "/chat.jsonl") << R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"cat"}]})"
                                   << "\n";
  out = glint(base + "--data " + d + "/chat.jsonl --output " + d + "/o5", &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("chat template"), std::string::npos) << out;
  EXPECT_EQ(out.find("--max-bad-lines"), std::string::npos) << out;
  // merge --output of an existing directory: a new one, or --overwrite (never "leave it out").
  fs::create_directories(d + "/busy");
  std::ofstream(d + "/busy/x") << "x";
  out = glint("merge --model " + d + "/model --adapter " + d + "/model --output " + d + "/busy", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--overwrite"), std::string::npos) << out;
  EXPECT_EQ(out.find("leave it out"), std::string::npos) << out;
}

// An adapter of another model is refused naming the model it was trained on, in merge,
// generate and --init-adapter alike.
TEST(TrainRun, AnotherModelsAdapterIsRefusedNamingItsBaseModel) {
  std::string d = text_model("wrong_base");
  std::ofstream(d + "/data.jsonl") << R"({"prompt":"hello","completion":" world cat"})" << "\n";
  int code;
  // The built-in task's adapter: trained on its own random base (OUT/base-model).
  std::string out = glint("train --steps 1 --eval-samples 0 --output " + d + "/builtin", &code);
  ASSERT_EQ(code, 0) << out;
  const std::string adapter = d + "/builtin/adapter";
  for (const std::string& cmd :
       {"merge --model " + d + "/model --adapter " + adapter + " --output " + d + "/merged",
        "generate --model " + d + "/model --prompt-ids 1,2 --max-new-tokens 2 --adapter " + adapter,
        "train --model " + d + "/model --data " + d + "/data.jsonl --steps 1 --batch-size 1 --init-adapter " + adapter +
            " --output " + d + "/init"}) {
    out = glint(cmd, &code);
    EXPECT_EQ(code, 1) << cmd << "\n" << out;
    EXPECT_NE(out.find("trained on " + d + "/builtin/base-model"), std::string::npos) << cmd << "\n" << out;
  }
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
