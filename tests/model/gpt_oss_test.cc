// gpt-oss against the independent float64 reference (tests/model/reference_gpt_oss.h):
// logits and the step-1 loss in every variant of its attention and RoPE, gradients of its
// own pieces (sinks, biases, the clamped GLU, the router's bias) by finite differences,
// packed sequences, the released config read, and the releases' MXFP4 experts: decoded by
// hand, read in slices that start inside a 32-value block, a corrupted scale named.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "core/fs.h"
#include "export/merge.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "lora/lora.h"
#include "lora/peft_io.h"
#include "model/causal_lm.h"
#include "model/gpt_oss/attention.h"
#include "model/moe.h"
#include "model/reference.h"
#include "model/reference_gpt_oss.h"
#include "model/weights.h"
#include "model_util.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::kF32;
using glint::testing::kF64;
using nlohmann::json;

// Three layers (sliding, full, sliding) with a window of 3, GQA 4:2, 6 experts top-2, YaRN
// without truncation, a clamp the random weights reach.
json gpt_oss_json() {
  return {{"model_type", "gpt_oss"},
          {"vocab_size", 40},
          {"hidden_size", 32},
          {"intermediate_size", 32},
          {"num_hidden_layers", 3},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 8},
          {"num_local_experts", 6},
          {"num_experts_per_tok", 2},
          {"sliding_window", 3},
          {"swiglu_limit", 1.5},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500.0},
          {"rope_scaling",
           {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 8.0}, {"beta_slow", 1.0}, {"truncate", false},
            {"original_max_position_embeddings", 16}}},
          {"max_position_embeddings", 64}};
}

using testing::logits_of;

using Variant = testing::ConfigVariant;

TEST(GptOss, LogitsAndStepOneLossMatchTheNaiveReferenceInEveryVariant) {
  std::vector<Variant> variants = {
      {"sliding, full, sliding; YaRN untruncated", [](json&) {}},
      {"YaRN truncated, v5 rope_parameters", [](json& j) {
         j["rope_parameters"] = j["rope_scaling"];
         j["rope_parameters"]["truncate"] = true;
         j["rope_parameters"]["rope_theta"] = 300.0;
         j.erase("rope_scaling");
         j.erase("rope_theta");
       }},
      {"no RoPE scaling, every layer full, no clamp reached", [](json& j) {
         j["rope_scaling"] = nullptr;
         j["layer_types"] = {"full_attention", "full_attention", "full_attention"};
         j["swiglu_limit"] = 50.0;
       }},
      {"a window wider than the rows, tied embeddings, top-3", [](json& j) {
         j["sliding_window"] = 16;
         j["tie_word_embeddings"] = true;
         j["num_experts_per_tok"] = 3;
       }},
  };
  testing::expect_variants_match_reference(gpt_oss_json(), variants, 40, testing::gpt_oss_reference_logits);
}

TEST(GptOss, GradientsOfSinksBiasesClampedGluAndRouterMatchFiniteDifferences) {
  CausalLM m(ModelConfig::from_json(gpt_oss_json(), "test config"), kF64);
  testing::randomize_around_init(*m, 7);
  at::Tensor ids = at::randint(0, 40, {2, 7}, at::kLong);
  at::Tensor probe = at::randn({2, 7, 40}, at::kDouble);
  auto f = [&] { return (logits_of(*m, ids) * probe).sum(); };
  for (int64_t l : {0, 1}) {
    SCOPED_TRACE(l == 0 ? "sliding layer" : "full layer");
    DecoderLayer layer = m->layer(l);
    GptOssAttentionImpl* attn = layer->attention<GptOssAttentionImpl>();
    ASSERT_NE(attn, nullptr);
    ExpertsImpl& ex = *layer->moe->experts;
    const std::vector<std::pair<const char*, at::Tensor*>> pieces = {
        {"sinks", &attn->sinks},
        {"q_proj.bias", &attn->q_proj->bias},
        {"k_proj.bias", &attn->k_proj->bias},
        {"v_proj.bias", &attn->v_proj->bias},
        {"o_proj.bias", &attn->o_proj->bias},
        {"router.weight", &layer->moe->gate->weight},
        {"router.bias", &layer->moe->gate->bias},
        {"experts.gate_up_proj", &ex.gate_up_proj},
        {"experts.gate_up_proj_bias", &ex.gate_up_proj_bias},
        {"experts.down_proj", &ex.down_proj},
        {"experts.down_proj_bias", &ex.down_proj_bias}};
    // Bound 1e-5 with eps 1e-4: float64's round-off of f (|f| ~ 1e2, ~1e-13 absolute)
    // over 2 eps is ~5e-10, against the smallest gradient entries (fd_check's floor 1e-4)
    // 5e-6 relative; the central difference's own error is O(eps^2) ~ 1e-8. (With eps
    // 1e-5 the round-off alone reached 1.4e-5.) A wrong term is off by O(1).
    for (const auto& [name, p] : pieces) {
      p->set_requires_grad(true);
      EXPECT_LT(testing::fd_check(f, *p, 12, /*eps=*/1e-4), 1e-5) << name;
      p->set_requires_grad(false);
    }
  }
}

// The clamped GLU's pieces on their own, against the formula: the clamp's kinks and both
// sides of them, with finite-difference gradients away from the kinks.
TEST(GptOss, ClampedGluIsTheFormulaAndItsGradient) {
  at::Tensor gate = at::linspace(-3, 3, 13, at::kDouble), up = at::linspace(-2.5, 2.5, 13, at::kDouble).flip(0);
  const double limit = 1.25;
  at::Tensor got = glu(gate, up, Glu{limit, 1.702, 1.0});
  for (int64_t i = 0; i < 13; ++i) {
    double g = std::min(gate[i].item<double>(), limit), u = std::clamp(up[i].item<double>(), -limit, limit);
    EXPECT_NEAR(got[i].item<double>(), g / (1 + std::exp(-1.702 * g)) * (u + 1), 1e-15) << i;
  }
  at::Tensor g = (gate + 0.1).requires_grad_(true);  // away from the kinks at +-1.25
  auto f = [&] { return glu(g, up, Glu{limit, 1.702, 1.0}).sum(); };
  EXPECT_LT(testing::fd_check(f, g, 13, 1e-6), 1e-7);
  at::Tensor u = (up + 0.1).requires_grad_(true);
  auto fu = [&] { return glu(gate + 0.1, u, Glu{limit, 1.702, 1.0}).sum(); };
  EXPECT_LT(testing::fd_check(fu, u, 13, 1e-6), 1e-7);
  // Plain SwiGLU, both inputs.
  at::Tensor g2 = gate.clone().requires_grad_(true), u2 = up.clone().requires_grad_(true);
  auto f2 = [&] { return (glu(g2, u2, Glu{}) * at::linspace(0.5, 2, 13, at::kDouble)).sum(); };
  EXPECT_LT(testing::fd_check(f2, g2, 13, 1e-6), 1e-7);
  EXPECT_LT(testing::fd_check(f2, u2, 13, 1e-6), 1e-7);
  // One [N, 2I] projection, by halves or interleaved, against finite differences.
  for (bool interleaved : {false, true}) {
    at::Tensor h = at::linspace(-3.05, 2.95, 24, at::kDouble).reshape({3, 8}).requires_grad_(true);  // no value at +-1.25
    auto fh = [&] { return (glu_packed(h, interleaved, Glu{limit, 1.702, 1.0}) * at::linspace(0.5, 2, 4, at::kDouble)).sum(); };
    EXPECT_LT(testing::fd_check(fh, h, 24, 1e-6), 1e-7) << "interleaved " << interleaved;
    // Its values: gate and up picked by column number, then the formula checked above.
    at::Tensor gate_cols = interleaved ? at::arange(0, 8, 2, at::kLong) : at::arange(0, 4, at::kLong);
    at::Tensor up_cols = interleaved ? at::arange(1, 8, 2, at::kLong) : at::arange(4, 8, at::kLong);
    at::NoGradGuard no_grad;
    at::Tensor want = glu(h.index_select(1, gate_cols), h.index_select(1, up_cols), Glu{limit, 1.702, 1.0});
    EXPECT_LT((glu_packed(h, interleaved, Glu{limit, 1.702, 1.0}) - want).abs().max().item<double>(), 1e-15)
        << "interleaved " << interleaved;
  }
}

// Two sequences packed in one row, then padding, give each sequence's logits alone: the
// window and the sinks stay within a sequence.
TEST(GptOss, PackedSequencesMatchEachAlone) {
  CausalLM m(ModelConfig::from_json(gpt_oss_json(), "test config"), kF64);
  testing::randomize_around_init(*m, 9);
  at::Tensor a = at::randint(0, 40, {1, 5}, at::kLong), b = at::randint(0, 40, {1, 6}, at::kLong);
  at::Tensor ids = at::cat({a, b, at::zeros({1, 2}, at::kLong)}, 1);
  at::Tensor pos = at::cat({testing::positions(a), testing::positions(b), at::zeros({1, 2}, at::kLong)}, 1);
  at::Tensor seg = at::cat({at::zeros({1, 5}, at::kLong), at::ones({1, 6}, at::kLong), at::full({1, 2}, -1, at::kLong)}, 1);
  at::NoGradGuard ng;
  at::Tensor packed = testing::logits_of(*m, ids, pos, seg);
  EXPECT_LT(testing::max_rel_err(packed.narrow(1, 0, 5), logits_of(*m, a)), 1e-12);
  EXPECT_LT(testing::max_rel_err(packed.narrow(1, 5, 6), logits_of(*m, b)), 1e-12);
  EXPECT_TRUE(at::isfinite(packed).all().item<bool>());
}

// openai/gpt-oss-120b's config.json, as transformers reads it.
TEST(GptOss, TheReleasedConfigReads) {
  json types = json::array();
  for (int i = 0; i < 18; ++i) {
    types.push_back("sliding_attention");
    types.push_back("full_attention");
  }
  json j = {{"architectures", {"GptOssForCausalLM"}},
            {"attention_bias", true},
            {"attention_dropout", 0.0},
            {"eos_token_id", 200002},
            {"experts_per_token", 4},
            {"head_dim", 64},
            {"hidden_act", "silu"},
            {"hidden_size", 2880},
            {"initial_context_length", 4096},
            {"initializer_range", 0.02},
            {"intermediate_size", 2880},
            {"layer_types", types},
            {"max_position_embeddings", 131072},
            {"model_type", "gpt_oss"},
            {"num_attention_heads", 64},
            {"num_experts_per_tok", 4},
            {"num_hidden_layers", 36},
            {"num_key_value_heads", 8},
            {"num_local_experts", 128},
            {"output_router_logits", false},
            {"pad_token_id", 199999},
            {"quantization_config",
             {{"modules_to_not_convert",
               {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
              {"quant_method", "mxfp4"}}},
            {"rms_norm_eps", 1e-05},
            {"rope_scaling",
             {{"beta_fast", 32.0}, {"beta_slow", 1.0}, {"factor", 32.0}, {"original_max_position_embeddings", 4096},
              {"rope_type", "yarn"}, {"truncate", false}}},
            {"rope_theta", 150000},
            {"router_aux_loss_coef", 0.9},
            {"sliding_window", 128},
            {"swiglu_limit", 7.0},
            {"tie_word_embeddings", false},
            {"transformers_version", "4.55.0.dev0"},
            {"use_cache", true},
            {"vocab_size", 201088}};
  ModelConfig c = ModelConfig::from_json(j, "gpt-oss-120b config.json");
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 4);
  EXPECT_EQ(c.moe_intermediate_size, 2880);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.layer_types.at(0), "sliding_attention");
  EXPECT_EQ(c.layer_types.at(35), "full_attention");
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 7.0);
  for (int64_t l = 0; l < 36; ++l) EXPECT_TRUE(c.is_moe_layer(l));
  EXPECT_EQ(ModelConfig::from_json(c.to_json(), "written").to_json(), c.to_json());
}

TEST(GptOss, ConfigErrorsNameTheField) {
  auto bad = [](const std::function<void(json&)>& edit, const std::string& needle) {
    json j = gpt_oss_json();
    edit(j);
    testing::expect_error_naming([&] { ModelConfig::from_json(j, "cfg.json"); }, needle);
  };
  bad([](json& j) { j["layer_types"] = {"full_attention", "linear_attention", "full_attention"}; }, "linear_attention");
  bad([](json& j) { j["layer_types"] = {"full_attention"}; }, "layer_types");
  bad([](json& j) { j["sliding_window"] = nullptr; }, "sliding_window");
  bad([](json& j) { j["num_experts_per_tok"] = 7; }, "num_experts_per_tok");
  bad([](json& j) { j["quantization_config"] = {{"quant_method", "fp8"}}; }, "fp8");
  bad([](json& j) { j["swiglu_limit"] = 0.0; }, "swiglu_limit");
  bad([](json& j) { j.erase("intermediate_size"); }, "intermediate_size");
}

// --- MXFP4 ---------------------------------------------------------------------------

// E2M1 values by code, written out: sign bit 3, then 0, 0.5, 1, 1.5, 2, 3, 4, 6.
double e2m1(int code) {
  static const double kMagnitude[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return (code & 8 ? -1.0 : 1.0) * kMagnitude[code & 7];
}

struct Mxfp4 {
  at::Tensor blocks, scales;  // [E, out, in/32, 16], [E, out, in/32] uint8
  at::Tensor values;          // [E, out, in] float64, decoded by hand
};

// Random codes with scales 2^-3 .. 2^2, decoded element by element.
Mxfp4 random_mxfp4(int64_t E, int64_t out, int64_t in, uint64_t seed) {
  at::manual_seed(seed);
  Mxfp4 q;
  q.blocks = at::randint(0, 256, {E, out, in / 32, 16}, at::kByte);
  q.scales = at::randint(124, 130, {E, out, in / 32}, at::kByte);
  q.values = at::empty({E, out, in}, at::kDouble);
  auto b = q.blocks.accessor<uint8_t, 4>();
  auto s = q.scales.accessor<uint8_t, 3>();
  auto v = q.values.accessor<double, 3>();
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; ++c) {
        const uint8_t byte = b[e][r][c / 32][(c % 32) / 2];
        const int code = c % 2 == 0 ? byte & 0x0F : byte >> 4;  // the low nibble first
        v[e][r][c] = e2m1(code) * std::ldexp(1.0, int(s[e][r][c / 32]) - 127);
      }
  return q;
}

// A tiny gpt-oss written as its release is: experts as MXFP4 blocks and scales, everything
// else as it is; returns the hand-decoded experts by packed key ([E, out, in]).
std::map<std::string, at::Tensor> write_mxfp4_release(CausalLMImpl& m, const std::string& dir,
                                                      const std::function<void(std::map<std::string, Mxfp4>&)>& corrupt = {}) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::map<std::string, Mxfp4> quantised;
  uint64_t seed = 100;
  for (auto& [key, t] : hub_state_dict(m)) {
    const bool packed = key.size() > 12 && (key.compare(key.size() - 12, 12, "gate_up_proj") == 0 ||
                                            key.compare(key.size() - 9, 9, "down_proj") == 0) &&
                        key.find("experts") != std::string::npos;
    if (!packed) {
      tensors.emplace_back(key, t);
      continue;
    }
    // [E, in, out] in the model: the release holds [E, out, in/32, 16].
    quantised[key] = random_mxfp4(t.size(0), t.size(2), t.size(1), ++seed);
  }
  if (corrupt) corrupt(quantised);
  std::map<std::string, at::Tensor> values;
  for (auto& [key, q] : quantised) {
    tensors.emplace_back(key + "_blocks", q.blocks);
    tensors.emplace_back(key + "_scales", q.scales);
    values[key] = q.values;
  }
  std::filesystem::create_directories(dir);
  json cfg = m.config.to_json();
  cfg["quantization_config"] = {{"quant_method", "mxfp4"}, {"modules_to_not_convert", {"model.layers.*.self_attn"}}};
  std::ofstream(dir + "/config.json") << cfg.dump();
  write_checkpoint(dir, tensors);
  return values;
}

TEST(GptOss, Mxfp4ReleaseExpertsLoadAsDecodedByHandAndMatchTheReference) {
  const std::string dir = testing::fresh_temp_dir("gpt_oss_mxfp4");
  json j = gpt_oss_json();
  CausalLM m(ModelConfig::from_json(j, "test config"), kF64);
  testing::randomize_around_init(*m, 11);
  std::map<std::string, at::Tensor> values = write_mxfp4_release(*m, dir + "/release");
  CausalLM loaded = from_pretrained(dir + "/release", kF64);
  std::map<std::string, at::Tensor> hub = testing::hub_weights_f64(*loaded);
  ASSERT_EQ(values.size(), 6u);
  for (auto& [key, v] : values) EXPECT_TRUE(at::equal(hub.at(key), v.transpose(1, 2))) << key;
  // The step-1 loss of the release against the reference, computed from the decoded values.
  at::Tensor ids = at::randint(0, 40, {2, 8}, at::kLong);
  at::NoGradGuard ng;
  at::Tensor want = testing::gpt_oss_reference_logits(j, hub, ids);
  EXPECT_LT(testing::max_rel_err(logits_of(*loaded, ids), want), 1e-10);

  // Ranges of the flattened [E, in, out] experts, as the FSDP shard loader reads them: one
  // starting inside a 32-value block and crossing into the next expert, one inside a block.
  auto ckpt = open_checkpoint(dir + "/release", loaded->config);
  for (const ParameterSite& site : parameter_sites(*loaded)) {
    if (!site.expert || site.layer != 1 || site.packed != PackedExpert::kGateUp) continue;
    at::Tensor flat = values.at(site.name).transpose(1, 2).contiguous().reshape({-1});
    const int64_t per = flat.numel() / site.tensor.size(0);
    for (auto [start, count] : {std::pair<int64_t, int64_t>{per - 37, 75}, {70, 5}, {0, flat.numel()}}) {
      at::Tensor got = read_parameter_range(*ckpt, site, site.tensor.sizes(), start, count, at::kDouble);
      EXPECT_TRUE(at::equal(got, flat.narrow(0, start, count))) << site.name << " from " << start;
    }
  }
}

TEST(GptOss, Mxfp4ExpertsLoadIntoAnExpertSliceAndFloat32) {
  const std::string dir = testing::fresh_temp_dir("gpt_oss_mxfp4_slice");
  CausalLM m(ModelConfig::from_json(gpt_oss_json(), "test config"), kF64);
  testing::randomize_around_init(*m, 12);
  std::map<std::string, at::Tensor> values = write_mxfp4_release(*m, dir);
  // Experts 2..3 of 6, as expert parallelism's rank 1 of 3 holds them.
  CausalLM part(ModelConfig::from_json(gpt_oss_json(), "test config"), kF32);
  for (int64_t l = 0; l < 3; ++l) {
    ExpertsImpl& ex = *part->layer(l)->moe->experts;
    at::NoGradGuard ng;
    for (PackedExpert t : {PackedExpert::kGateUp, PackedExpert::kDown, PackedExpert::kGateUpBias, PackedExpert::kDownBias})
      ex.packed(t).set_(ex.packed(t).narrow(0, 2, 2).clone());
    ex.first_expert = 2;
  }
  load_weights(*part, *open_checkpoint(dir, part->config));
  const std::string key = "model.layers.2.mlp.experts.down_proj";
  at::Tensor want = values.at(key).narrow(0, 2, 2).transpose(1, 2).to(at::kFloat);  // exact: few bits
  EXPECT_TRUE(at::equal(part->layer(2)->moe->experts->down_proj, want));
}

TEST(GptOss, ACorruptedMxfp4ScaleIsNamed) {
  const std::string dir = testing::fresh_temp_dir("gpt_oss_mxfp4_bad");
  CausalLM m(ModelConfig::from_json(gpt_oss_json(), "test config"), kF64);
  write_mxfp4_release(*m, dir + "/nan", [](std::map<std::string, Mxfp4>& q) {
    q.at("model.layers.1.mlp.experts.down_proj").scales[3][5][0] = 0xFF;  // E8M0's NaN
  });
  testing::expect_error_naming([&] { from_pretrained(dir + "/nan", kF64); },
                               "model.layers.1.mlp.experts.down_proj_blocks");
  write_mxfp4_release(*m, dir + "/shape", [](std::map<std::string, Mxfp4>& q) {
    auto& s = q.at("model.layers.0.mlp.experts.gate_up_proj").scales;
    s = s.narrow(2, 0, 0).clone();
  });
  testing::expect_error_naming([&] { from_pretrained(dir + "/shape", kF64); },
                               "model.layers.0.mlp.experts.gate_up_proj_scales");
}

// A LoRA adapter on the experts of an MXFP4 release, saved in PEFT's form and merged: the
// merged experts are the hand-decoded values plus PEFT's delta for an input-major parameter
// (ParamWrapper with is_transposed: A [r*E, in] rows e*r + k, B [out, r*E] columns k*E + e,
// delta[e] = scale * (B_e A_e)^T), computed here from the adapter file, in bfloat16 as
// save_pretrained writes a dequantised gpt-oss, with no quantization_config left.
TEST(GptOss, MergingIntoAnMxfp4ReleaseWritesBf16ExpertsWithPeftsDelta) {
  const std::string dir = testing::fresh_temp_dir("gpt_oss_merge");
  CausalLM m(ModelConfig::from_json(gpt_oss_json(), "test config"), kF32);
  testing::randomize_around_init(*m, 13);
  std::map<std::string, at::Tensor> values = write_mxfp4_release(*m, dir + "/release");
  CausalLM base = from_pretrained(dir + "/release", kF32);
  LoraOptions o;
  LoraOptions::parse_targets("experts.gate_up_proj,experts.down_proj,q_proj", "test", &o);
  o.r = 2;
  o.alpha = 6.0;
  LoraModel lora = apply_lora(*base, o, 3);
  {
    at::NoGradGuard ng;
    for (at::Tensor& t : lora.parameters()) t.uniform_(-0.3, 0.3);
  }
  save_adapter(dir + "/adapter", lora, dir + "/release");
  MergeOptions mo;
  mo.model_dir = dir + "/release";
  mo.adapter_dir = dir + "/adapter";
  mo.output = dir + "/merged";
  merge_adapter(mo);
  const json cfg = read_json_file(dir + "/merged/config.json");
  EXPECT_FALSE(cfg.contains("quantization_config"));
  CheckpointReader merged(dir + "/merged");
  SafetensorsFile adapter(dir + "/adapter/adapter_model.safetensors");
  const double scale = 6.0 / 2.0;
  const int64_t E = 6, r = 2;
  for (int64_t l = 0; l < 3; ++l) {
    const std::string module = "model.layers." + std::to_string(l) + ".mlp.experts";
    // gate_up_proj is the inner wrapper (base_layer), down_proj the outer.
    for (auto [param, peft] : {std::pair<std::string, std::string>{"gate_up_proj", ".base_layer"}, {"down_proj", ""}}) {
      const std::string key = module + "." + param;
      EXPECT_EQ(merged.info(key).stored_dtype, "BF16") << key;
      at::Tensor A = adapter.read("base_model.model." + module + peft + ".lora_A.weight").to(at::kDouble);
      at::Tensor B = adapter.read("base_model.model." + module + peft + ".lora_B.weight").to(at::kDouble);
      at::Tensor want = values.at(key).transpose(1, 2).clone();  // [E, in, out]
      for (int64_t e = 0; e < E; ++e) {
        at::Tensor Be = B.slice(1, e, B.size(1), E);  // [out, r]: columns k*E + e
        at::Tensor Ae = A.narrow(0, e * r, r);        // [r, in]
        want[e] += scale * at::matmul(Be, Ae).t();
      }
      at::Tensor got = merged.read(key).to(at::kDouble);
      EXPECT_LT(testing::max_rel_err(got, want), 1.0 / 128) << key;  // bfloat16's rounding
      // Every element within one bfloat16 step of its own value.
      EXPECT_TRUE(((got - want).abs() <= want.abs() * (1.0 / 128) + 1e-30).all().item<bool>()) << key;
    }
  }
}

}  // namespace
}  // namespace glint
