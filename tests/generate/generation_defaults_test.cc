// What a model directory says about generating from it, checked against what transformers
// reads (generation/configuration_utils.py): generation_config.json over config.json,
// GenerationConfig's defaults (greedy, temperature 1.0, top_k 50, top_p 1.0) for what
// neither sets, and the stop tokens from every source.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "generate/generation_defaults.h"
#include "model/config.h"
#include "test_util.h"

namespace glint {
namespace {

using nlohmann::json;

// A model directory holding only a config.json (tiny_moe_config plus `extra`).
std::string model_dir(const std::string& name, const json& extra) {
  const std::string d = testing::fresh_temp_dir(name);
  json j = tiny_moe_config(300).to_json();
  j.update(extra);
  std::ofstream(d + "/config.json") << j.dump();
  return d;
}

TEST(ModelStopTokenIds, GenerationConfigElseConfigJsonPlusTheTokenizersEos) {
  const std::string d = model_dir("stop_ids", {{"eos_token_id", 5}});
  EXPECT_EQ(model_stop_token_ids(d), std::vector<int64_t>{5});
  // generation_config.json's eos_token_id (an int or a list) wins ...
  std::ofstream(d + "/generation_config.json") << R"({"eos_token_id": [7, 8], "do_sample": false})";
  EXPECT_EQ(model_stop_token_ids(d), (std::vector<int64_t>{7, 8}));
  // ... and config.json's counts when it has none.
  std::ofstream(d + "/generation_config.json") << R"({"temperature": 0.6})";
  EXPECT_EQ(model_stop_token_ids(d), std::vector<int64_t>{5});
  // The tokenizer's eos_token, when there is a tokenizer (here or in tokenizer_dir).
  const std::string fixture = std::string(GLINT_TEST_DATA_DIR) + "/tokenizer_fixture/tokenizer.json";
  const std::string tok = testing::fresh_temp_dir("stop_ids_tokenizer");
  std::filesystem::copy_file(fixture, tok + "/tokenizer.json");
  std::ofstream(tok + "/tokenizer_config.json") << R"({"eos_token": "<|im_end|>"})";
  EXPECT_EQ(model_stop_token_ids(d, tok), (std::vector<int64_t>{5, 270}));
  std::filesystem::copy_file(tok + "/tokenizer.json", d + "/tokenizer.json");
  std::filesystem::copy_file(tok + "/tokenizer_config.json", d + "/tokenizer_config.json");
  EXPECT_EQ(model_stop_token_ids(d), (std::vector<int64_t>{5, 270}));
  // No repeats.
  std::ofstream(d + "/generation_config.json") << R"({"eos_token_id": [270, 5, 270]})";
  EXPECT_EQ(model_stop_token_ids(d), (std::vector<int64_t>{270, 5}));
  // A malformed one names the file and the field.
  std::ofstream(d + "/generation_config.json") << R"({"eos_token_id": "</s>"})";
  testing::expect_error_naming([&] { model_stop_token_ids(d); }, "generation_config.json: eos_token_id");
}

TEST(GenerationDefaults, AsTransformersReadsThem) {
  const std::string d = model_dir("gen_defaults", json::object());
  // Nothing set: GenerationConfig's defaults, greedy.
  GenerationDefaults g = read_generation_defaults(d);
  EXPECT_FALSE(g.do_sample);
  EXPECT_EQ(g.temperature, 1.0);
  EXPECT_EQ(g.top_k, 50);
  EXPECT_EQ(g.top_p, 1.0);
  EXPECT_TRUE(g.stop_token_ids.empty());
  // do_sample alone: temperature 1.0 and top_k 50, not some other default.
  std::ofstream(d + "/generation_config.json") << R"({"do_sample": true})";
  g = read_generation_defaults(d);
  EXPECT_TRUE(g.do_sample);
  EXPECT_EQ(g.temperature, 1.0);
  EXPECT_EQ(g.top_k, 50);
  // A temperature without do_sample is still greedy.
  std::ofstream(d + "/generation_config.json") << R"({"temperature": 0.6, "top_p": 0.9})";
  g = read_generation_defaults(d);
  EXPECT_FALSE(g.do_sample);
  EXPECT_EQ(g.temperature, 0.6);
  EXPECT_EQ(g.top_p, 0.9);
  // null turns top-k and top-p off.
  std::ofstream(d + "/generation_config.json") << R"({"do_sample": true, "top_k": null, "top_p": null})";
  g = read_generation_defaults(d);
  EXPECT_EQ(g.top_k, 0);
  EXPECT_EQ(g.top_p, 1.0);
  std::ofstream(d + "/generation_config.json") << R"({"temperature": -1})";
  testing::expect_error_naming([&] { read_generation_defaults(d); }, "temperature");
  // Without generation_config.json, config.json's fields (the top level, then text_config).
  std::filesystem::remove(d + "/generation_config.json");
  const std::string legacy =
      model_dir("gen_defaults_legacy", {{"do_sample", true}, {"text_config", {{"temperature", 0.5}, {"top_k", 7}}},
                                        {"top_k", 3}, {"eos_token_id", 9}});
  g = read_generation_defaults(legacy);
  EXPECT_TRUE(g.do_sample);
  EXPECT_EQ(g.temperature, 0.5);
  EXPECT_EQ(g.top_k, 3);
  EXPECT_EQ(g.stop_token_ids, std::vector<int64_t>{9});
}

}  // namespace
}  // namespace glint
