// Every registered model family at tiny size: forward and backward, save_pretrained ->
// from_pretrained, LoRA with the family's PEFT key names, and through the CLI
// init-model -> train -> adapter. A family that registers gets these checks for free.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>

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

class Family : public ::testing::TestWithParam<const ModelFamily*> {};

std::string family_name(const ::testing::TestParamInfo<const ModelFamily*>& info) { return info.param->name(); }

at::Tensor loss_of(CausalLMImpl& m, const at::Tensor& ids) {
  at::Tensor pos = at::arange(ids.size(1), at::kLong).repeat({ids.size(0), 1});
  return causal_lm_loss(m, ids, ids, pos, at::zeros_like(ids)).ce_sum;
}

TEST_P(Family, TinyModelRunsSavesLoadsAndTrainsLora) {
  const ModelFamily& f = *GetParam();
  ModelConfig c = f.tiny(64);
  EXPECT_EQ(&family_for(c.model_type, "test"), &f);
  // The tiny model has MoE layers (and each family's other layer kinds, by its config).
  bool any_moe = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) any_moe |= c.is_moe_layer(l);
  EXPECT_TRUE(any_moe) << "tiny config of " << f.name() << " has no MoE layer";
  // config.json round trip.
  ModelConfig again = ModelConfig::from_json(c.to_json(), "round trip");
  EXPECT_EQ(again.to_json(), c.to_json());

  CausalLM m(c, kF64);
  init_weights(*m, 1);
  at::Tensor ids = at::randint(0, 64, {2, 19}, at::kLong);  // long enough for every compressor window
  at::Tensor loss = loss_of(*m, ids);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  loss.backward();
  // Every parameter gets a gradient, but DeepSeek-V4's indexer: it only selects entries, and
  // a selection passes no gradient (as in transformers; DeepSeek trains it with a loss of
  // its own). Its tensors must still load, save and shard like the others.
  for (const auto& item : m->named_parameters()) {
    const bool selector = f.name() == "deepseek_v4" && item.key().find(".compressor.indexer.") != std::string::npos;
    EXPECT_EQ(item.value().grad().defined(), !selector) << f.name() << ": gradient of " << item.key();
  }

  std::string dir = testing::fresh_temp_dir("family_" + f.name());
  save_pretrained(*m, dir + "/model");
  CausalLM loaded = from_pretrained(dir + "/model", kF64);
  auto a = m->named_parameters(), b = loaded->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i].value(), b[i].value())) << a[i].key();
  auto ba = m->named_buffers(), bb = loaded->named_buffers();
  ASSERT_EQ(ba.size(), bb.size());
  for (size_t i = 0; i < ba.size(); ++i) EXPECT_TRUE(at::equal(ba[i].value(), bb[i].value())) << ba[i].key();
  {
    at::NoGradGuard ng;
    EXPECT_TRUE(at::equal(loss_of(*loaded, ids), loss.detach()));
  }

  // LoRA on every target: each name the family lists matches something, and every
  // adapted tensor appears in the PEFT file.
  LoraOptions o;
  LoraOptions::parse_targets("all", "t", &o);
  o.r = 2;
  LoraModel lora = apply_lora(*loaded, o, 3);
  std::set<std::string> matched;
  for (const auto& s : lora.sites) matched.insert(s.parameter.empty() ? s.module_path.substr(s.module_path.rfind('.') + 1)
                                                                      : "experts." + s.parameter);
  for (const auto& t : f.lora_targets())
    if (t != "q_proj" || !matched.count("q_a_proj")) EXPECT_TRUE(matched.count(t)) << f.name() << " target " << t;
  save_adapter(dir + "/adapter", lora, dir + "/model");
  SafetensorsFile file(dir + "/adapter/adapter_model.safetensors");
  EXPECT_EQ(file.keys().size(), 2 * lora.sites.size());

  // Through the CLI: init-model, a few LoRA steps, the adapter written.
  std::ofstream(dir + "/config.json") << c.to_json().dump();
  testing::RunResult r = testing::run_glint("init-model --config " + dir + "/config.json --output " + dir +
                                            "/cli_model --seed 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_glint("train --model " + dir + "/cli_model --steps 2 --batch-size 2 --seq-len 16 --lora-r 2 " +
                         "--output " + dir + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::ifstream(dir + "/run/adapter/adapter_model.safetensors").good()) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Registry, Family, ::testing::ValuesIn(model_families()), family_name);

// The PEFT module names of each family's adapted tensors, pinned: an adapter must load
// in PEFT unchanged, so a renamed module is a breaking change.
TEST(Family, PeftKeyNamesArePinnedPerFamily) {
  std::map<std::string, std::vector<std::string>> want = {
      {"qwen3",
       {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.experts.gate_up_proj",
        "mlp.experts.down_proj"}},
      {"deepseek_v3",
       {"self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj",
        "self_attn.o_proj", "mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.shared_experts.gate_proj",
        "mlp.shared_experts.up_proj", "mlp.shared_experts.down_proj"}},
      {"qwen3_5",
       {"linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b", "linear_attn.in_proj_a",
        "linear_attn.out_proj", "mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.shared_expert.gate_proj",
        "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj", "mlp.shared_expert_gate"}},
      {"deepseek_v4",
       {"self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_proj", "self_attn.o_a_proj", "self_attn.o_b_proj",
        "mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.shared_experts.gate_proj",
        "mlp.shared_experts.up_proj", "mlp.shared_experts.down_proj"}},
      {"qwen3_next",
       {"linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba", "linear_attn.out_proj", "mlp.experts.gate_up_proj",
        "mlp.experts.down_proj", "mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj",
        "mlp.shared_expert.down_proj", "mlp.shared_expert_gate"}},
      {"glm4_moe",
       {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.experts.gate_up_proj",
        "mlp.experts.down_proj", "mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj",
        "mlp.shared_experts.down_proj"}},
      {"gpt_oss",
       {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.experts.gate_up_proj",
        "mlp.experts.down_proj"}},
  };
  ASSERT_EQ(want.size(), model_families().size()) << "pin the PEFT names of every registered family";
  for (const ModelFamily* f : model_families()) {
    ModelConfig c = f->tiny(64);
    int64_t moe_layer = 0;
    while (!c.is_moe_layer(moe_layer)) ++moe_layer;
    CausalLM m(c, kF64);
    LoraOptions o;
    LoraOptions::parse_targets("all", "t", &o);
    LoraModel lora = make_lora(*m, o, 1);
    const std::string prefix = "model.layers." + std::to_string(moe_layer) + ".";
    std::vector<std::string> got;
    for (const auto& s : lora.sites) {
      std::string name = s.module_path + (s.parameter.empty() ? "" : "." + s.parameter);
      if (name.rfind(prefix, 0) == 0) got.push_back(name.substr(prefix.size()));
    }
    EXPECT_EQ(got, want.at(f->name())) << f->name();
  }
}

}  // namespace
}  // namespace glint
