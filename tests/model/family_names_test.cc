// Every key glint writes for a family, checked against the names of that family's released
// checkpoints and PEFT adapters: the model directory save_pretrained writes, a LoRA adapter
// on every target of the family, and the merged model. The expected names are written here
// by hand, one list per family, from the releases' key inventories (Qwen/Qwen3-30B-A3B,
// deepseek-ai/DeepSeek-V3, Qwen/Qwen3.5-35B-A3B's text model, Qwen/Qwen3-Next-80B-A3B,
// zai-org/GLM-4.5 and GLM-4.5-Air, openai/gpt-oss-20b,
// transformers' DeepSeek-V4 names; PEFT's "base_model.model.<module>.lora_{A,B}.weight"),
// never from the code under test. Every written key must match one pattern of its family,
// and every pattern must be matched by some key, so a missing tensor fails as a misnamed
// one does. {L} is a decoder layer, {E} an expert.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "core/fs.h"
#include "export/merge.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "lora/lora.h"
#include "lora/peft_io.h"
#include "model/causal_lm.h"
#include "model/family.h"
#include "model/weights.h"
#include "model_util.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::kF64;

struct ReleaseNames {
  std::vector<std::string> model;    // keys of the model directory (and of the merged model)
  std::vector<std::string> adapter;  // PEFT module paths of the adapter on every target
  std::vector<std::string> target_parameters;  // adapter_config.json's, with both expert targets
};

// "model.layers.{L}.mlp.experts.{E}.gate_proj.weight" -> an anchored regex.
std::regex pattern_regex(const std::string& pattern) {
  std::string re;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern.compare(i, 3, "{L}") == 0 || pattern.compare(i, 3, "{E}") == 0) {
      re += "[0-9]+";
      i += 2;
    } else if (pattern[i] == '.') {
      re += "\\.";
    } else {
      re += pattern[i];
    }
  }
  return std::regex("^" + re + "$");
}

const std::map<std::string, ReleaseNames>& release_names() {
  static const std::map<std::string, ReleaseNames> names = {
      {"qwen3",
       {{"model.embed_tokens.weight",
         "model.norm.weight",
         "lm_head.weight",
         "model.layers.{L}.input_layernorm.weight",
         "model.layers.{L}.post_attention_layernorm.weight",
         "model.layers.{L}.self_attn.q_proj.weight",
         "model.layers.{L}.self_attn.k_proj.weight",
         "model.layers.{L}.self_attn.v_proj.weight",
         "model.layers.{L}.self_attn.o_proj.weight",
         "model.layers.{L}.self_attn.q_norm.weight",
         "model.layers.{L}.self_attn.k_norm.weight",
         "model.layers.{L}.mlp.gate_proj.weight",  // a dense layer (mlp_only_layers)
         "model.layers.{L}.mlp.up_proj.weight",
         "model.layers.{L}.mlp.down_proj.weight",
         "model.layers.{L}.mlp.gate.weight",
         "model.layers.{L}.mlp.experts.{E}.gate_proj.weight",
         "model.layers.{L}.mlp.experts.{E}.up_proj.weight",
         "model.layers.{L}.mlp.experts.{E}.down_proj.weight"},
        {"model.layers.{L}.self_attn.q_proj", "model.layers.{L}.self_attn.k_proj", "model.layers.{L}.self_attn.v_proj",
         "model.layers.{L}.self_attn.o_proj", "model.layers.{L}.mlp.gate_proj", "model.layers.{L}.mlp.up_proj",
         "model.layers.{L}.mlp.down_proj", "model.layers.{L}.mlp.experts.base_layer", "model.layers.{L}.mlp.experts"},
        {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}}},
      {"deepseek_v3",
       {{"model.embed_tokens.weight",
         "model.norm.weight",
         "lm_head.weight",
         "model.layers.{L}.input_layernorm.weight",
         "model.layers.{L}.post_attention_layernorm.weight",
         "model.layers.{L}.self_attn.q_a_proj.weight",
         "model.layers.{L}.self_attn.q_a_layernorm.weight",
         "model.layers.{L}.self_attn.q_b_proj.weight",
         "model.layers.{L}.self_attn.kv_a_proj_with_mqa.weight",
         "model.layers.{L}.self_attn.kv_a_layernorm.weight",
         "model.layers.{L}.self_attn.kv_b_proj.weight",
         "model.layers.{L}.self_attn.o_proj.weight",
         "model.layers.{L}.mlp.gate_proj.weight",  // the first_k_dense_replace layers
         "model.layers.{L}.mlp.up_proj.weight",
         "model.layers.{L}.mlp.down_proj.weight",
         "model.layers.{L}.mlp.gate.weight",
         "model.layers.{L}.mlp.gate.e_score_correction_bias",
         "model.layers.{L}.mlp.experts.{E}.gate_proj.weight",
         "model.layers.{L}.mlp.experts.{E}.up_proj.weight",
         "model.layers.{L}.mlp.experts.{E}.down_proj.weight",
         "model.layers.{L}.mlp.shared_experts.gate_proj.weight",
         "model.layers.{L}.mlp.shared_experts.up_proj.weight",
         "model.layers.{L}.mlp.shared_experts.down_proj.weight"},
        {"model.layers.{L}.self_attn.q_a_proj", "model.layers.{L}.self_attn.q_b_proj",
         "model.layers.{L}.self_attn.kv_a_proj_with_mqa", "model.layers.{L}.self_attn.kv_b_proj",
         "model.layers.{L}.self_attn.o_proj", "model.layers.{L}.mlp.gate_proj", "model.layers.{L}.mlp.up_proj",
         "model.layers.{L}.mlp.down_proj", "model.layers.{L}.mlp.shared_experts.gate_proj",
         "model.layers.{L}.mlp.shared_experts.up_proj", "model.layers.{L}.mlp.shared_experts.down_proj",
         "model.layers.{L}.mlp.experts.base_layer", "model.layers.{L}.mlp.experts"},
        {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}}},
      {"qwen3_5",
       {{"model.embed_tokens.weight",
         "model.norm.weight",
         "lm_head.weight",
         "model.layers.{L}.input_layernorm.weight",
         "model.layers.{L}.post_attention_layernorm.weight",
         "model.layers.{L}.linear_attn.in_proj_qkv.weight",
         "model.layers.{L}.linear_attn.in_proj_z.weight",
         "model.layers.{L}.linear_attn.in_proj_b.weight",
         "model.layers.{L}.linear_attn.in_proj_a.weight",
         "model.layers.{L}.linear_attn.conv1d.weight",
         "model.layers.{L}.linear_attn.dt_bias",
         "model.layers.{L}.linear_attn.A_log",
         "model.layers.{L}.linear_attn.norm.weight",
         "model.layers.{L}.linear_attn.out_proj.weight",
         "model.layers.{L}.self_attn.q_proj.weight",
         "model.layers.{L}.self_attn.k_proj.weight",
         "model.layers.{L}.self_attn.v_proj.weight",
         "model.layers.{L}.self_attn.o_proj.weight",
         "model.layers.{L}.self_attn.q_norm.weight",
         "model.layers.{L}.self_attn.k_norm.weight",
         "model.layers.{L}.mlp.gate.weight",
         "model.layers.{L}.mlp.experts.gate_up_proj",  // packed on disk in the release
         "model.layers.{L}.mlp.experts.down_proj",
         "model.layers.{L}.mlp.shared_expert.gate_proj.weight",
         "model.layers.{L}.mlp.shared_expert.up_proj.weight",
         "model.layers.{L}.mlp.shared_expert.down_proj.weight",
         "model.layers.{L}.mlp.shared_expert_gate.weight"},
        {"model.layers.{L}.linear_attn.in_proj_qkv", "model.layers.{L}.linear_attn.in_proj_z",
         "model.layers.{L}.linear_attn.in_proj_b", "model.layers.{L}.linear_attn.in_proj_a",
         "model.layers.{L}.linear_attn.out_proj", "model.layers.{L}.self_attn.q_proj",
         "model.layers.{L}.self_attn.k_proj", "model.layers.{L}.self_attn.v_proj", "model.layers.{L}.self_attn.o_proj",
         "model.layers.{L}.mlp.shared_expert.gate_proj", "model.layers.{L}.mlp.shared_expert.up_proj",
         "model.layers.{L}.mlp.shared_expert.down_proj", "model.layers.{L}.mlp.shared_expert_gate",
         "model.layers.{L}.mlp.experts.base_layer", "model.layers.{L}.mlp.experts"},
        {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}}},
      {"glm4_moe",
       {{"model.embed_tokens.weight",
         "model.norm.weight",
         "lm_head.weight",
         "model.layers.{L}.input_layernorm.weight",
         "model.layers.{L}.post_attention_layernorm.weight",
         "model.layers.{L}.self_attn.q_proj.weight",
         "model.layers.{L}.self_attn.q_proj.bias",
         "model.layers.{L}.self_attn.k_proj.weight",
         "model.layers.{L}.self_attn.k_proj.bias",
         "model.layers.{L}.self_attn.v_proj.weight",
         "model.layers.{L}.self_attn.v_proj.bias",
         "model.layers.{L}.self_attn.o_proj.weight",
         "model.layers.{L}.self_attn.q_norm.weight",  // use_qk_norm (GLM-4.5, GLM-4.6)
         "model.layers.{L}.self_attn.k_norm.weight",
         "model.layers.{L}.mlp.gate_proj.weight",  // the first_k_dense_replace layers
         "model.layers.{L}.mlp.up_proj.weight",
         "model.layers.{L}.mlp.down_proj.weight",
         "model.layers.{L}.mlp.gate.weight",
         "model.layers.{L}.mlp.gate.e_score_correction_bias",
         "model.layers.{L}.mlp.experts.{E}.gate_proj.weight",
         "model.layers.{L}.mlp.experts.{E}.up_proj.weight",
         "model.layers.{L}.mlp.experts.{E}.down_proj.weight",
         "model.layers.{L}.mlp.shared_experts.gate_proj.weight",
         "model.layers.{L}.mlp.shared_experts.up_proj.weight",
         "model.layers.{L}.mlp.shared_experts.down_proj.weight"},
        {"model.layers.{L}.self_attn.q_proj", "model.layers.{L}.self_attn.k_proj", "model.layers.{L}.self_attn.v_proj",
         "model.layers.{L}.self_attn.o_proj", "model.layers.{L}.mlp.gate_proj", "model.layers.{L}.mlp.up_proj",
         "model.layers.{L}.mlp.down_proj", "model.layers.{L}.mlp.shared_experts.gate_proj",
         "model.layers.{L}.mlp.shared_experts.up_proj", "model.layers.{L}.mlp.shared_experts.down_proj",
         "model.layers.{L}.mlp.experts.base_layer", "model.layers.{L}.mlp.experts"},
        {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}}},
      {"gpt_oss",  // transformers' names; openai/gpt-oss-20b's experts add MXFP4 _blocks/_scales
       {{"model.embed_tokens.weight",
         "model.norm.weight",
         "lm_head.weight",
         "model.layers.{L}.input_layernorm.weight",
         "model.layers.{L}.post_attention_layernorm.weight",
         "model.layers.{L}.self_attn.q_proj.weight",
         "model.layers.{L}.self_attn.q_proj.bias",
         "model.layers.{L}.self_attn.k_proj.weight",
         "model.layers.{L}.self_attn.k_proj.bias",
         "model.layers.{L}.self_attn.v_proj.weight",
         "model.layers.{L}.self_attn.v_proj.bias",
         "model.layers.{L}.self_attn.o_proj.weight",
         "model.layers.{L}.self_attn.o_proj.bias",
         "model.layers.{L}.self_attn.sinks",
         "model.layers.{L}.mlp.router.weight",
         "model.layers.{L}.mlp.router.bias",
         "model.layers.{L}.mlp.experts.gate_up_proj",
         "model.layers.{L}.mlp.experts.gate_up_proj_bias",
         "model.layers.{L}.mlp.experts.down_proj",
         "model.layers.{L}.mlp.experts.down_proj_bias"},
        {"model.layers.{L}.self_attn.q_proj", "model.layers.{L}.self_attn.k_proj", "model.layers.{L}.self_attn.v_proj",
         "model.layers.{L}.self_attn.o_proj", "model.layers.{L}.mlp.experts.base_layer", "model.layers.{L}.mlp.experts"},
        {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}}},
      {"qwen3_next",
       {{"model.embed_tokens.weight",
         "model.norm.weight",
         "lm_head.weight",
         "model.layers.{L}.input_layernorm.weight",
         "model.layers.{L}.post_attention_layernorm.weight",
         "model.layers.{L}.linear_attn.in_proj_qkvz.weight",
         "model.layers.{L}.linear_attn.in_proj_ba.weight",
         "model.layers.{L}.linear_attn.conv1d.weight",
         "model.layers.{L}.linear_attn.dt_bias",
         "model.layers.{L}.linear_attn.A_log",
         "model.layers.{L}.linear_attn.norm.weight",
         "model.layers.{L}.linear_attn.out_proj.weight",
         "model.layers.{L}.self_attn.q_proj.weight",
         "model.layers.{L}.self_attn.k_proj.weight",
         "model.layers.{L}.self_attn.v_proj.weight",
         "model.layers.{L}.self_attn.o_proj.weight",
         "model.layers.{L}.self_attn.q_norm.weight",
         "model.layers.{L}.self_attn.k_norm.weight",
         "model.layers.{L}.mlp.gate_proj.weight",  // a dense layer (mlp_only_layers)
         "model.layers.{L}.mlp.up_proj.weight",
         "model.layers.{L}.mlp.down_proj.weight",
         "model.layers.{L}.mlp.gate.weight",
         "model.layers.{L}.mlp.experts.{E}.gate_proj.weight",
         "model.layers.{L}.mlp.experts.{E}.up_proj.weight",
         "model.layers.{L}.mlp.experts.{E}.down_proj.weight",
         "model.layers.{L}.mlp.shared_expert.gate_proj.weight",
         "model.layers.{L}.mlp.shared_expert.up_proj.weight",
         "model.layers.{L}.mlp.shared_expert.down_proj.weight",
         "model.layers.{L}.mlp.shared_expert_gate.weight"},
        {"model.layers.{L}.linear_attn.in_proj_qkvz", "model.layers.{L}.linear_attn.in_proj_ba",
         "model.layers.{L}.linear_attn.out_proj", "model.layers.{L}.self_attn.q_proj",
         "model.layers.{L}.self_attn.k_proj", "model.layers.{L}.self_attn.v_proj", "model.layers.{L}.self_attn.o_proj",
         "model.layers.{L}.mlp.gate_proj", "model.layers.{L}.mlp.up_proj", "model.layers.{L}.mlp.down_proj",
         "model.layers.{L}.mlp.shared_expert.gate_proj", "model.layers.{L}.mlp.shared_expert.up_proj",
         "model.layers.{L}.mlp.shared_expert.down_proj", "model.layers.{L}.mlp.shared_expert_gate",
         "model.layers.{L}.mlp.experts.base_layer", "model.layers.{L}.mlp.experts"},
        {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}}},
      {"deepseek_v4",
       {{"model.embed_tokens.weight",
         "model.norm.weight",
         "lm_head.weight",
         "model.hc_head.hc_fn",
         "model.hc_head.hc_base",
         "model.hc_head.hc_scale",
         "model.layers.{L}.input_layernorm.weight",
         "model.layers.{L}.post_attention_layernorm.weight",
         "model.layers.{L}.attn_hc.fn",
         "model.layers.{L}.attn_hc.base",
         "model.layers.{L}.attn_hc.scale",
         "model.layers.{L}.ffn_hc.fn",
         "model.layers.{L}.ffn_hc.base",
         "model.layers.{L}.ffn_hc.scale",
         "model.layers.{L}.self_attn.q_a_proj.weight",
         "model.layers.{L}.self_attn.q_a_norm.weight",
         "model.layers.{L}.self_attn.q_b_proj.weight",
         "model.layers.{L}.self_attn.kv_proj.weight",
         "model.layers.{L}.self_attn.kv_norm.weight",
         "model.layers.{L}.self_attn.o_a_proj.weight",
         "model.layers.{L}.self_attn.o_b_proj.weight",
         "model.layers.{L}.self_attn.sinks",
         "model.layers.{L}.self_attn.compressor.kv_proj.weight",
         "model.layers.{L}.self_attn.compressor.gate_proj.weight",
         "model.layers.{L}.self_attn.compressor.kv_norm.weight",
         "model.layers.{L}.self_attn.compressor.position_bias",
         "model.layers.{L}.self_attn.compressor.indexer.q_b_proj.weight",
         "model.layers.{L}.self_attn.compressor.indexer.scorer.weights_proj.weight",
         "model.layers.{L}.self_attn.compressor.indexer.kv_proj.weight",
         "model.layers.{L}.self_attn.compressor.indexer.gate_proj.weight",
         "model.layers.{L}.self_attn.compressor.indexer.kv_norm.weight",
         "model.layers.{L}.self_attn.compressor.indexer.position_bias",
         "model.layers.{L}.mlp.gate.weight",
         "model.layers.{L}.mlp.gate.e_score_correction_bias",
         "model.layers.{L}.mlp.gate.tid2eid",
         "model.layers.{L}.mlp.shared_experts.gate_proj.weight",
         "model.layers.{L}.mlp.shared_experts.up_proj.weight",
         "model.layers.{L}.mlp.shared_experts.down_proj.weight",
         "model.layers.{L}.mlp.experts.gate_up_proj",  // transformers packs the release's ffn.experts.E.w1/w3
         "model.layers.{L}.mlp.experts.down_proj"},
        {"model.layers.{L}.self_attn.q_a_proj", "model.layers.{L}.self_attn.q_b_proj",
         "model.layers.{L}.self_attn.kv_proj", "model.layers.{L}.self_attn.o_a_proj",
         "model.layers.{L}.self_attn.o_b_proj", "model.layers.{L}.self_attn.compressor.kv_proj",
         "model.layers.{L}.self_attn.compressor.gate_proj", "model.layers.{L}.self_attn.compressor.indexer.kv_proj",
         "model.layers.{L}.self_attn.compressor.indexer.gate_proj",
         "model.layers.{L}.self_attn.compressor.indexer.q_b_proj",
         "model.layers.{L}.self_attn.compressor.indexer.scorer.weights_proj",
         "model.layers.{L}.mlp.shared_experts.gate_proj", "model.layers.{L}.mlp.shared_experts.up_proj",
         "model.layers.{L}.mlp.shared_experts.down_proj", "model.layers.{L}.mlp.experts.base_layer",
         "model.layers.{L}.mlp.experts"},
        {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}}},
  };
  return names;
}

// Every key in `keys` matches one of `patterns`, and every pattern matches some key.
void expect_keys_match(const std::vector<std::string>& keys, const std::vector<std::string>& patterns,
                       const std::string& what) {
  std::vector<std::regex> res;
  for (const auto& p : patterns) res.push_back(pattern_regex(p));
  std::vector<bool> used(patterns.size(), false);
  for (const std::string& key : keys) {
    bool any = false;
    for (size_t i = 0; i < res.size(); ++i)
      if (std::regex_match(key, res[i])) any = used[i] = true;
    EXPECT_TRUE(any) << what << ": key '" << key << "' is not a name of the family's releases";
  }
  for (size_t i = 0; i < patterns.size(); ++i)
    EXPECT_TRUE(used[i]) << what << ": no key matches '" << patterns[i] << "'";
}

// The adapter's PEFT keys, for module-path patterns.
std::vector<std::string> adapter_key_patterns(const std::vector<std::string>& modules) {
  std::vector<std::string> out;
  for (const auto& m : modules)
    for (const char* ab : {"lora_A", "lora_B"}) out.push_back("base_model.model." + m + "." + ab + ".weight");
  return out;
}

std::vector<std::string> checkpoint_keys(const std::string& dir) { return CheckpointReader(dir).keys(); }

class FamilyNames : public ::testing::TestWithParam<const ModelFamily*> {};

std::string names_test_family_name(const ::testing::TestParamInfo<const ModelFamily*>& info) { return info.param->name(); }

TEST_P(FamilyNames, EveryWrittenKeyIsAReleaseName) {
  const ModelFamily& f = *GetParam();
  auto it = release_names().find(f.name());
  ASSERT_NE(it, release_names().end()) << "write down the release key names of family " << f.name();
  const ReleaseNames& want = it->second;

  CausalLM m(f.tiny(64), kF64);
  init_weights(*m, 5);
  const std::string dir = testing::fresh_temp_dir("family_names_" + f.name());
  save_pretrained(*m, dir + "/model");
  expect_keys_match(checkpoint_keys(dir + "/model"), want.model, f.name() + " model");
  // (That the written directory loads back into an equal model: Registry/Family.)

  // A LoRA adapter on every target of the family, both expert tensors included.
  LoraOptions o;
  LoraOptions::parse_targets("all", "test", &o);
  o.r = 2;
  LoraModel lora = apply_lora(*m, o, 3);
  {
    at::NoGradGuard no_grad;
    for (at::Tensor& t : lora.parameters()) t.uniform_(-0.1, 0.1);  // a merge that changes every adapted tensor
  }
  save_adapter(dir + "/adapter", lora, dir + "/model");
  expect_keys_match(SafetensorsFile(dir + "/adapter/adapter_model.safetensors").keys(),
                    adapter_key_patterns(want.adapter), f.name() + " adapter");
  const nlohmann::json config = read_json_file(dir + "/adapter/adapter_config.json");
  EXPECT_EQ(config.at("target_parameters"), nlohmann::json(want.target_parameters)) << f.name();

  // The merged model: the base's names, every one.
  MergeOptions mo;
  mo.model_dir = dir + "/model";
  mo.adapter_dir = dir + "/adapter";
  mo.output = dir + "/merged";
  merge_adapter(mo);
  expect_keys_match(checkpoint_keys(dir + "/merged"), want.model, f.name() + " merged model");
  CausalLM merged = from_pretrained(dir + "/merged", kF64);
  EXPECT_EQ(merged->named_parameters().size(), m->named_parameters().size());
}

INSTANTIATE_TEST_SUITE_P(Registry, FamilyNames, ::testing::ValuesIn(model_families()), names_test_family_name);

TEST(FamilyNames, EveryFamilyHasItsReleaseNamesWrittenDown) {
  EXPECT_EQ(release_names().size(), model_families().size());
}

}  // namespace
}  // namespace glint
