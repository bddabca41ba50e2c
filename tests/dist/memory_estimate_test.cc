// The memory estimate printed before step 1 against what the steps measure (--profile:
// the bytes live at a step's peak over its start, through the allocators' reports), for
// every family's tiny model under LoRA and --full, on 1 rank and on 4 ranks with
// --ep 2 --fsdp: the step's part of the estimate (activations, loss, gathered layers,
// gradients) within 0.8-1.3x of the measured peak.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>
#include <string>

#include "model/family.h"
#include "test_util.h"
#include "tiny_run.h"

namespace {

using glint::testing::launch;
using glint::testing::RunResult;

// The MB of `part` in the estimate line ("activations 23"); 0 when the line omits it.
double estimate_part(const std::string& line, const std::string& part) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex(part + " ([0-9,]+)"))) return 0;
  std::string digits = m[1];
  digits.erase(std::remove(digits.begin(), digits.end(), ','), digits.end());
  return std::stod(digits);
}

class PeakMemory : public ::testing::TestWithParam<const glint::ModelFamily*> {};

TEST_P(PeakMemory, EstimateIsWithinTheMeasuredStepPeak) {
  const std::string family = GetParam()->name();
  const std::string dir = glint::testing::fresh_temp_dir("peak_" + family);
  RunResult made = glint::testing::run_glint("init-model --tiny " + family + " --vocab-size 256 --output " + dir +
                                             "/model --seed 1");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  {
    std::ofstream data(dir + "/data.jsonl");
    uint64_t x = 12345;
    for (int i = 0; i < 32; ++i) {
      nlohmann::json ids = nlohmann::json::array();
      for (int t = 0; t < 256; ++t) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids.push_back(int((x >> 33) % 256));
      }
      data << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
    }
  }
  struct Run {
    int ranks;
    const char* flags;
  };
  for (Run run : {Run{1, ""}, Run{1, "--full"}, Run{4, "--ep 2 --fsdp"}, Run{4, "--ep 2 --fsdp --full"}}) {
    const std::string name = std::to_string(run.ranks) + " ranks " + run.flags;
    SCOPED_TRACE(name);
    const std::string out = dir + "/run" + std::to_string(run.ranks) + (std::string(run.flags).find("--full") != std::string::npos ? "f" : "l");
    RunResult r = launch(run.ranks, "train --model " + dir + "/model --data " + dir + "/data.jsonl --steps 2 --batch-size " +
                                         std::to_string(8 * run.ranks) + " --micro-batch-size 8 --seq-len 256 "
                                         "--eval-samples 0 --profile " + run.flags + " --output " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("estimated peak [^\n]*"))) << r.output;
    const std::string line = m[0];
    const double said = estimate_part(line, "gradients") + estimate_part(line, "activations") +
                        estimate_part(line, "loss") + estimate_part(line, "gathered layers");
    std::ifstream in(out + "/profile.json");
    ASSERT_TRUE(in) << out << "/profile.json";
    const double measured = nlohmann::json::parse(in)["memory"]["peak_over_step_start_mb"].get<double>();
    std::printf("%s, %s: estimated %.0f MB, measured %.1f MB (%.2fx)\n", family.c_str(), name.c_str(), said, measured,
                said / measured);
    EXPECT_GE(said, 0.8 * measured) << line;
    EXPECT_LE(said, 1.3 * measured) << line;
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, PeakMemory, ::testing::ValuesIn(glint::model_families()),
                         [](const auto& info) { return info.param->name(); });

}  // namespace
