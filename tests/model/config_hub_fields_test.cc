// The Hugging Face fields a config.json may hold whatever its family: the special token
// ids (bos/eos/pad_token_id, eos an int or a list) and the dtype. Read for every registered
// family (a multimodal config's text_config when the top level has none), written back
// by to_json and save_pretrained, and kept by init-model, which also writes the weights in
// the dtype the config declares.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "core/fs.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/config.h"
#include "model/family.h"
#include "model/qwen3_5/family.h"
#include "model/weights.h"
#include "model_util.h"
#include "test_util.h"

namespace glint {
namespace {

using nlohmann::json;
using glint::testing::kF32;

TEST(HubFields, SpecialTokenIdsRoundTripInEveryFamily) {
  for (const ModelFamily* f : model_families()) {
    SCOPED_TRACE(f->name());
    json j = f->tiny(64).to_json();
    EXPECT_FALSE(j.contains("eos_token_id")) << "a config without them gains none";
    j["bos_token_id"] = 1;
    j["eos_token_id"] = {2, 3};
    j["pad_token_id"] = 0;
    const ModelConfig c = ModelConfig::from_json(j, "cfg.json");
    EXPECT_EQ(c.bos_token_id, std::optional<int64_t>(1));
    EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(c.pad_token_id, std::optional<int64_t>(0));
    const json back = c.to_json();
    EXPECT_EQ(back.value("bos_token_id", json()), json(1));
    EXPECT_EQ(back.value("eos_token_id", json()), json({2, 3}));
    EXPECT_EQ(back.value("pad_token_id", json()), json(0));
    // An int stays an int, a one-element list a list.
    j["eos_token_id"] = 2;
    EXPECT_EQ(ModelConfig::from_json(j, "cfg.json").to_json().value("eos_token_id", json()), json(2));
    j["eos_token_id"] = {2};
    EXPECT_EQ(ModelConfig::from_json(j, "cfg.json").to_json().value("eos_token_id", json()), json({2}));
    // Null is absent, as in transformers.
    j["bos_token_id"] = nullptr;
    EXPECT_FALSE(ModelConfig::from_json(j, "cfg.json").to_json().contains("bos_token_id"));
    j["eos_token_id"] = "</s>";
    testing::expect_error_naming([&] { ModelConfig::from_json(j, "cfg.json"); }, "eos_token_id");
  }
}

// A multimodal release (qwen3_5_moe) keeps the text model under text_config: its special
// tokens and dtype count when the top level has none, and the top level's win.
TEST(HubFields, TextConfigFieldsCountWhenTheTopLevelHasNone) {
  json text = qwen3_5_family().tiny(64).to_json();
  text.erase("torch_dtype");
  text["eos_token_id"] = 7;
  text["bos_token_id"] = 5;
  json top = {{"model_type", "qwen3_5_moe"}, {"text_config", text}, {"torch_dtype", "bfloat16"}};
  ModelConfig c = ModelConfig::from_json(top, "mm.json");
  EXPECT_EQ(c.eos_token_id, std::vector<int64_t>{7});
  EXPECT_EQ(c.bos_token_id, std::optional<int64_t>(5));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  top["eos_token_id"] = {8, 9};
  top.erase("torch_dtype");
  top["dtype"] = "float16";  // transformers v5's spelling
  c = ModelConfig::from_json(top, "mm.json");
  EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(c.bos_token_id, std::optional<int64_t>(5));
  EXPECT_EQ(c.torch_dtype, "float16");
}

// What a --full run saves (save_pretrained) keeps them.
TEST(HubFields, SavePretrainedKeepsThem) {
  ModelConfig c = tiny_moe_config(16);
  c.bos_token_id = 11;
  c.eos_token_id = {13};
  c.pad_token_id = 0;
  CausalLM m(c, kF32);
  init_weights(*m, 0);
  const std::string d = testing::fresh_temp_dir("hub_fields_save");
  save_pretrained(*m, d);
  const json saved = read_json_file(d + "/config.json");
  EXPECT_EQ(saved.value("bos_token_id", json()), json(11));
  EXPECT_EQ(saved.value("eos_token_id", json()), json(13));
  EXPECT_EQ(saved.value("pad_token_id", json()), json(0));
  EXPECT_EQ(from_pretrained(d, kF32)->config.eos_token_id, std::vector<int64_t>{13});
}

TEST(InitModel, KeepsTheSpecialTokenIdsOfItsConfig) {
  const std::string d = testing::fresh_temp_dir("init_model_tokens");
  json j = tiny_moe_config(16).to_json();
  j["bos_token_id"] = 14;
  j["eos_token_id"] = {13, 15};
  j["pad_token_id"] = 0;
  std::ofstream(d + "/config.json") << j.dump();
  auto r = testing::run_glint("init-model --config " + d + "/config.json --output " + d + "/model");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json saved = read_json_file(d + "/model/config.json");
  EXPECT_EQ(saved.value("bos_token_id", json()), json(14)) << saved.dump();
  EXPECT_EQ(saved.value("eos_token_id", json()), json({13, 15})) << saved.dump();
  EXPECT_EQ(saved.value("pad_token_id", json()), json(0)) << saved.dump();
}

TEST(InitModel, WritesTheDtypeItsConfigDeclaresUnlessDtypeIsGiven) {
  const std::string d = testing::fresh_temp_dir("init_model_dtype");
  struct Case {
    std::string field, value, flag, stored, written;
  };
  const std::vector<Case> cases = {
      {"torch_dtype", "bfloat16", "", "BF16", "bfloat16"},
      {"dtype", "float16", "", "F16", "float16"},  // transformers v5's spelling
      {"torch_dtype", "bfloat16", " --dtype float32", "F32", "float32"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.field + " " + c.value + c.flag);
    json j = tiny_moe_config(16).to_json();
    j.erase("torch_dtype");
    j[c.field] = c.value;
    const std::string dir = d + "/" + std::to_string(i);
    std::ofstream(d + "/config" + std::to_string(i) + ".json") << j.dump();
    auto r = testing::run_glint("init-model --config " + d + "/config" + std::to_string(i) + ".json --output " + dir +
                                c.flag);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    SafetensorsFile file(dir + "/model.safetensors");
    for (const std::string& key : file.keys()) EXPECT_EQ(file.info(key).stored_dtype, c.stored) << key;
    EXPECT_EQ(read_json_file(dir + "/config.json").value("torch_dtype", json()), json(c.written));
  }
}

}  // namespace
}  // namespace glint
