// glint merge: a LoRA adapter folded into its base model, written as a Hub checkpoint.
// The reference for every check is the base model with the adapter attached (LoRA applied
// as a low-rank product at run time): the merged model must compute the same logits.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "core/fs.h"
#include "export/merge.h"
#include "io/model_files.h"
#include "io/raw_safetensors.h"
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
using glint::testing::kF32;

namespace fs = std::filesystem;
using nlohmann::json;

at::Tensor logits_of(CausalLMImpl& m, const at::Tensor& ids) {
  at::NoGradGuard ng;
  at::Tensor pos = at::arange(ids.size(1), at::kLong).repeat({ids.size(0), 1});
  return m.logits(m.forward(ids, pos, at::zeros_like(ids)).hidden);
}

double max_relative_error(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).abs().max().item<double>() / want.abs().max().item<double>();
}

// An adapter on every target of `model` (all linears, both expert tensors, shared experts
// included), with random nonzero B, saved into `dir`; router correction biases (when the
// family has them) moved and saved beside it.
void write_random_adapter(CausalLMImpl& model, const std::string& dir, uint64_t seed, int64_t r = 2) {
  LoraOptions o;
  LoraOptions::parse_targets("all", "test", &o);
  o.r = r;
  o.alpha = 3.0;
  LoraModel lora = make_lora(model, o, seed);
  at::manual_seed(int64_t(seed));
  {
    at::NoGradGuard ng;
    for (LoraSite& s : lora.sites) s.B().normal_(0, 0.5);
  }
  save_adapter(dir, lora, "base");
  std::vector<std::pair<std::string, at::Tensor>> biases;
  for (auto& [name, b] : router_biases(model)) biases.emplace_back(name, at::randn_like(b));
  if (!biases.empty()) write_safetensors(dir + "/" + kRouterBiasesFile, biases);
}

// The base with the adapter attached, as glint trains and serves it.
at::Tensor adapted_logits(const std::string& base, const std::string& adapter, const TensorPlacement& place,
                          const at::Tensor& ids) {
  CausalLM m = from_pretrained(base, place);
  load_adapter(adapter, *m);
  return logits_of(*m, ids);
}

MergeOptions merge_options(const std::string& model, const std::string& adapter, const std::string& output) {
  MergeOptions o;
  o.model_dir = model;
  o.adapter_dir = adapter;
  o.output = output;
  return o;
}

// Entries of `dir` whose name contains `part` (a staging directory left behind).
int entries_named(const std::string& dir, const std::string& part) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(part) != std::string::npos;
  return n;
}

class MergeFamily : public ::testing::TestWithParam<const ModelFamily*> {};

std::string family_name(const ::testing::TestParamInfo<const ModelFamily*>& info) { return info.param->name(); }

// For every registered family: the merged float64 model computes the logits of the base
// with the adapter attached (expert LoRA, shared experts and router biases included).
TEST_P(MergeFamily, MergedModelEqualsBasePlusAdapter) {
  const ModelFamily& f = *GetParam();
  const std::string d = testing::fresh_temp_dir("merge_family_" + f.name());
  CausalLM base(f.tiny(64), kF64);
  init_weights(*base, 1);
  save_pretrained(*base, d + "/base");
  write_random_adapter(*base, d + "/adapter", 7);

  MergeReport r = merge_adapter(merge_options(d + "/base", d + "/adapter", d + "/merged"));
  EXPECT_GT(r.adapted, 0);
  EXPECT_EQ(r.router_biases, !router_biases(*base).empty());
  EXPECT_EQ(r.files, 1);
  EXPECT_FALSE(r.dequantised);

  at::manual_seed(3);
  at::Tensor ids = at::randint(0, 64, {2, 19}, at::kLong);  // long enough for every compressor window
  at::Tensor want = adapted_logits(d + "/base", d + "/adapter", kF64, ids);
  CausalLM merged = from_pretrained(d + "/merged", kF64);
  EXPECT_LE(max_relative_error(logits_of(*merged, ids), want), 1e-10) << f.name();
  // The adapter changed the model: the base alone is far from it.
  EXPECT_GT(max_relative_error(logits_of(*base, ids), want), 1e-3) << f.name();

  // The Hub form save_pretrained writes for the family, every tensor in its stored dtype
  // (float64; DeepSeek-V4's hash-routing tables int64).
  CheckpointReader written(d + "/merged"), saved(d + "/base");
  EXPECT_EQ(written.keys(), saved.keys());
  for (const auto& key : written.keys())
    EXPECT_EQ(written.info(key).stored_dtype, saved.info(key).stored_dtype) << key;
  EXPECT_EQ(read_json_file(d + "/merged/config.json"), read_json_file(d + "/base/config.json"));
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, MergeFamily, ::testing::ValuesIn(model_families()), family_name);

// --- through the binary -------------------------------------------------------------

std::string glint(const std::string& args, int* code) {
  testing::RunResult r = testing::run_glint(args);
  *code = r.exit_code;
  return r.output;
}

// A small Qwen3-MoE model directory (float32 unless `dtype`) with the fixture tokenizer.
std::string qwen3_moe_model(const std::string& d, const std::string& dtype = "float32") {
  json c = {{"model_type", "qwen3_moe"}, {"vocab_size", 300}, {"hidden_size", 16},
            {"intermediate_size", 32},   {"moe_intermediate_size", 8},
            {"num_hidden_layers", 2},    {"num_attention_heads", 2},
            {"num_key_value_heads", 1},  {"head_dim", 8},
            {"num_experts", 4},          {"num_experts_per_tok", 2}};
  std::ofstream(d + "/config.json") << c.dump();
  int code;
  std::string out =
      glint("init-model --config " + d + "/config.json --output " + d + "/model --seed 1 --dtype " + dtype, &code);
  EXPECT_EQ(code, 0) << out;
  fs::copy_file(std::string(GLINT_TEST_DATA_DIR) + "/tokenizer_fixture/tokenizer.json", d + "/model/tokenizer.json");
  json tc = {{"eos_token", "<|im_end|>"},
             {"chat_template",
              "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}};
  std::ofstream(d + "/model/tokenizer_config.json") << tc.dump();
  return d + "/model";
}

// A random adapter for the model in `model_dir`, built on a skeleton (no weights read).
void write_adapter_for(const std::string& model_dir, const std::string& adapter, uint64_t seed, int64_t r = 2) {
  CausalLM skeleton(ModelConfig::from_file(model_dir + "/config.json"),
                    TensorPlacement{at::kFloat, c10::Device(c10::kCPU), /*lazy=*/true});
  write_random_adapter(*skeleton, adapter, seed, r);
}

// Qwen3-MoE is written with the Hub's per-expert keys; the merged directory is a whole
// model: it reloads as a base and trains.
TEST(MergeQwen3Moe, PerExpertKeysReloadAsABaseAndTrain) {
  const std::string d = testing::fresh_temp_dir("merge_qwen3");
  const std::string model = qwen3_moe_model(d);
  write_adapter_for(model, d + "/adapter", 5);
  int code;
  std::string out = glint("merge --model " + model + " --adapter " + d + "/adapter --output " + d + "/merged", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("tensors written"), std::string::npos) << out;
  EXPECT_NE(out.find("peak RSS"), std::string::npos) << out;
  CheckpointReader ckpt(d + "/merged");
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t e = 0; e < 4; ++e)
      for (const char* p : {"gate_proj", "up_proj", "down_proj"}) EXPECT_TRUE(ckpt.contains(expert_key(l, e, p)));
  for (const auto& key : ckpt.keys()) {
    EXPECT_EQ(key.find("gate_up_proj"), std::string::npos) << key;
    EXPECT_EQ(ckpt.info(key).stored_dtype, "F32") << key;
  }
  EXPECT_EQ(ckpt.info(expert_key(1, 3, "down_proj")).shape, (std::vector<int64_t>{16, 8}));
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_TRUE(fs::exists(d + "/merged/" + f)) << f;
  at::Tensor ids = at::randint(0, 300, {2, 7}, at::kLong);
  CausalLM merged = from_pretrained(d + "/merged", kF32);
  EXPECT_LE(max_relative_error(logits_of(*merged, ids), adapted_logits(model, d + "/adapter", kF32, ids)), 1e-5);

  std::ofstream(d + "/data.jsonl")
      << R"({"messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"cat world"}]})" << "\n"
      << R"({"prompt":"hello","completion":" world cat"})" << "\n";
  out = glint("train --model " + d + "/merged --data " + d + "/data.jsonl --steps 2 --batch-size 2 --output " + d +
                  "/run",
              &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(fs::exists(d + "/run/adapter/adapter_model.safetensors"));
}

// Shards at --max-shard-size, with an index that names every key and the total size; the
// sharded model loads to the same weights as a single-file one.
TEST(MergeSharding, SmallShardSizeGivesSeveralShardsAndACorrectIndex) {
  const std::string d = testing::fresh_temp_dir("merge_shards");
  const std::string model = qwen3_moe_model(d);
  write_adapter_for(model, d + "/adapter", 6);
  int code;
  std::string out = glint("merge --model " + model + " --adapter " + d + "/adapter --output " + d +
                              "/sharded --max-shard-size 8K",
                          &code);
  ASSERT_EQ(code, 0) << out;
  out = glint("merge --model " + model + " --adapter " + d + "/adapter --output " + d + "/single", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(fs::exists(d + "/single/model.safetensors"));
  EXPECT_FALSE(fs::exists(d + "/single/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(d + "/sharded/model.safetensors"));
  json index = read_json_file(d + "/sharded/model.safetensors.index.json");
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(d + "/sharded"))
    if (e.path().extension() == ".safetensors") files.insert(e.path().filename().string());
  EXPECT_GE(files.size(), 3u);
  uint64_t total = 0, largest_file = 0;
  std::set<std::string> indexed;
  for (const auto& file : files) {
    EXPECT_TRUE(std::regex_match(file, std::regex("model-000\\d\\d-of-000\\d\\d\\.safetensors"))) << file;
    SafetensorsFile f(d + "/sharded/" + file);
    uint64_t bytes = 0;
    for (const auto& key : f.keys()) {
      EXPECT_EQ(index["weight_map"][key], file) << key;
      indexed.insert(key);
      bytes += f.info(key).end - f.info(key).begin;
    }
    total += bytes;
    largest_file = std::max(largest_file, bytes);
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(index["weight_map"].size(), indexed.size());
  CheckpointReader single(d + "/single");
  EXPECT_EQ(std::vector<std::string>(indexed.begin(), indexed.end()), single.keys());
  // The embedding [300,16] float32 (19200 bytes) is over 8K: a shard of its own; others stay under.
  EXPECT_EQ(largest_file, 300u * 16 * 4);
  CausalLM a = from_pretrained(d + "/sharded", kF32), b = from_pretrained(d + "/single", kF32);
  auto pa = a->named_parameters(), pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(at::equal(pa[i].value(), pb[i].value())) << pa[i].key();
}

// The base's dtype is kept (bfloat16 in, bfloat16 out); --dtype converts.
TEST(MergeDtype, Bfloat16BaseGivesBfloat16AndDtypeConverts) {
  const std::string d = testing::fresh_temp_dir("merge_dtype");
  const std::string model = qwen3_moe_model(d, "bfloat16");
  write_adapter_for(model, d + "/adapter", 8);
  MergeReport r = merge_adapter(merge_options(model, d + "/adapter", d + "/kept"));
  CheckpointReader kept(d + "/kept");
  for (const auto& key : kept.keys()) EXPECT_EQ(kept.info(key).stored_dtype, "BF16") << key;
  EXPECT_EQ(read_json_file(d + "/kept/config.json")["torch_dtype"], "bfloat16");
  uint64_t bytes = 0;
  for (const auto& key : kept.keys()) bytes += kept.info(key).end - kept.info(key).begin;
  EXPECT_EQ(r.bytes, bytes);
  // The merged bfloat16 weights are the float32 merge rounded once.
  MergeOptions o = merge_options(model, d + "/adapter", d + "/f32");
  o.dtype = "float32";
  merge_adapter(o);
  CheckpointReader f32(d + "/f32");
  for (const auto& key : f32.keys()) {
    EXPECT_EQ(f32.info(key).stored_dtype, "F32") << key;
    EXPECT_TRUE(at::equal(f32.read(key).to(at::kBFloat16), kept.read(key))) << key;
  }
  EXPECT_EQ(read_json_file(d + "/f32/config.json")["torch_dtype"], "float32");
  o.output = d + "/f16";
  o.dtype = "float16";
  merge_adapter(o);
  CheckpointReader f16(d + "/f16");
  for (const auto& key : f16.keys()) EXPECT_EQ(f16.info(key).stored_dtype, "F16") << key;
}

// Streaming, measured by the kernel: the peak RSS of `glint merge` on a model of 8 layers
// exceeds that of the same model with 1 layer by far less than one layer, although the
// 8-layer model is ~8x larger. A merge that held the model (or even two layers) at once
// would differ by several layers. RSS differences of whole processes are robust on a
// busy machine (the noise is a few MB; the margin is tens of MB).
TEST(MergeStreaming, PeakMemoryDoesNotGrowWithTheNumberOfLayers) {
  const std::string d = testing::fresh_temp_dir("merge_rss");
  auto peak_rss_mb = [&](int64_t layers) {
    const std::string dir = d + "/l" + std::to_string(layers);
    fs::create_directories(dir);
    json c = {{"model_type", "qwen3_moe"}, {"vocab_size", 256}, {"hidden_size", 512},
              {"moe_intermediate_size", 384}, {"num_hidden_layers", layers}, {"num_attention_heads", 8},
              {"num_key_value_heads", 8},  {"head_dim", 64}, {"num_experts", 16}, {"num_experts_per_tok", 2}};
    std::ofstream(dir + "/config.json") << c.dump();
    int code;
    std::string out = glint("init-model --config " + dir + "/config.json --output " + dir + "/model", &code);
    EXPECT_EQ(code, 0) << out;
    write_adapter_for(dir + "/model", dir + "/adapter", 9, 4);
    out = glint("merge --model " + dir + "/model --adapter " + dir + "/adapter --output " + dir + "/merged", &code);
    EXPECT_EQ(code, 0) << out;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out, m, std::regex("peak RSS ([0-9.]+) MB"))) << out;
    return m.size() > 1 ? std::stod(m[1]) : 0.0;
  };
  // One layer: 16 experts x 3 x 512 x 384 + 4 x 512 x 512 + router = 10.5M floats = 42 MB.
  const double layer_mb = (16.0 * 3 * 512 * 384 + 4.0 * 512 * 512 + 16 * 512 + 2 * 512 + 128) * 4 / 1e6;
  const double one = peak_rss_mb(1), eight = peak_rss_mb(8);
  EXPECT_LT(eight - one, 0.5 * layer_mb) << "peak RSS: 1 layer " << one << " MB, 8 layers " << eight
                                         << " MB; one layer is " << layer_mb << " MB";
  fs::remove_all(d);  // ~0.8 GB of models
}

// --- multi-tenant runs -----------------------------------------------------------------

// A multi-tenant run writes RUN/<tenant>/adapter, an ordinary PEFT adapter: each merges
// into the base like any other.
TEST(MergeTenants, EachTenantsAdapterMerges) {
  const std::string d = testing::fresh_temp_dir("merge_tenants");
  const std::string model = qwen3_moe_model(d);
  std::ofstream data(d + "/ids.jsonl");
  for (int i = 0; i < 4; ++i) data << R"({"input_ids":[1,2,3,4,5,6,7,8],"labels":[-100,-100,5,6,7,8,9,10]})" << "\n";
  data.close();
  int code;
  std::string out = glint("train --model " + model + " --steps 2 --batch-size 2 --lr 0.01 --tenant name=alpha,r=4,data=" +
                              d + "/ids.jsonl --tenant name=beta,r=2,data=" + d + "/ids.jsonl --output " + d + "/run",
                          &code);
  ASSERT_EQ(code, 0) << out;
  at::Tensor ids = at::randint(0, 300, {2, 9}, at::kLong);
  CausalLM base = from_pretrained(model, kF32);
  for (const char* tenant : {"alpha", "beta"}) {
    const std::string adapter = d + "/run/" + tenant + "/adapter";
    out = glint("merge --model " + model + " --adapter " + adapter + " --output " + d + "/merged_" + tenant, &code);
    ASSERT_EQ(code, 0) << out;
    at::Tensor want = adapted_logits(model, adapter, kF32, ids);
    EXPECT_GT(max_relative_error(logits_of(*base, ids), want), 1e-5) << tenant << ": training moved nothing";
    CausalLM merged = from_pretrained(d + "/merged_" + tenant, kF32);
    EXPECT_LE(max_relative_error(logits_of(*merged, ids), want), 1e-5) << tenant;
  }
}

// --- errors ------------------------------------------------------------------------

// Every refused merge names the problem and leaves nothing at --output (an existing one
// untouched) and no staging directory beside it.
TEST(MergeErrors, BadInputsAreClearErrorsAndLeaveNoOutput) {
  const std::string d = testing::fresh_temp_dir("merge_errors");
  const std::string model = qwen3_moe_model(d);
  write_adapter_for(model, d + "/adapter", 4);
  auto refused = [&](const std::string& args, int want_code, const std::string& needle) {
    int code;
    std::string out = glint("merge --model " + model + " " + args, &code);
    EXPECT_EQ(code, want_code) << args << "\n" << out;
    EXPECT_NE(out.find(needle), std::string::npos) << args << "\n" << out;
    EXPECT_EQ(entries_named(d, ".merging."), 0) << args;
    return out;
  };
  // No adapter_config.json.
  fs::create_directories(d + "/weights_only");
  fs::copy_file(d + "/adapter/adapter_model.safetensors", d + "/weights_only/adapter_model.safetensors");
  refused("--adapter " + d + "/weights_only --output " + d + "/out", 1, "adapter_config.json");
  EXPECT_FALSE(fs::exists(d + "/out"));
  // An adapter of another model: wider hidden size (a shape mismatch naming the key).
  {
    fs::create_directories(d + "/other");
    json c = read_json_file(model + "/config.json");
    c["hidden_size"] = 24;
    std::ofstream(d + "/other/config.json") << c.dump();
    write_adapter_for(d + "/other", d + "/other_adapter", 4);
  }
  refused("--adapter " + d + "/other_adapter --output " + d + "/out", 1,
          "'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' has shape");
  EXPECT_FALSE(fs::exists(d + "/out"));
  // An adapter of a deeper model: a key this model does not have.
  {
    fs::create_directories(d + "/deeper");
    json c = read_json_file(model + "/config.json");
    c["num_hidden_layers"] = 3;
    std::ofstream(d + "/deeper/config.json") << c.dump();
    write_adapter_for(d + "/deeper", d + "/deeper_adapter", 4);
  }
  refused("--adapter " + d + "/deeper_adapter --output " + d + "/out", 1, "unexpected key 'base_model.model.model.layers.2.");
  EXPECT_FALSE(fs::exists(d + "/out"));
  // Bad --dtype: a usage error.
  refused("--adapter " + d + "/adapter --output " + d + "/out --dtype int8", 2, "--dtype");
  EXPECT_FALSE(fs::exists(d + "/out"));
  // An existing non-empty output: refused without --overwrite, left as it was.
  fs::create_directories(d + "/busy");
  std::ofstream(d + "/busy/keep.txt") << "mine";
  refused("--adapter " + d + "/adapter --output " + d + "/busy", 2, "keep.txt");
  EXPECT_EQ(testing::run("cat " + d + "/busy/keep.txt").output, "mine");
  // With --overwrite but a bad adapter: the old content survives.
  refused("--adapter " + d + "/other_adapter --output " + d + "/busy --overwrite", 1, "has shape");
  EXPECT_TRUE(fs::exists(d + "/busy/keep.txt"));
  // The base itself as output.
  refused("--adapter " + d + "/adapter --output " + model + " --overwrite", 2, "elsewhere");
  EXPECT_TRUE(fs::exists(model + "/config.json"));
  // --overwrite with a good adapter replaces the old content once the new one is complete.
  int code;
  std::string out = glint("merge --model " + model + " --adapter " + d + "/adapter --output " + d + "/busy --overwrite",
                          &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_FALSE(fs::exists(d + "/busy/keep.txt"));
  EXPECT_TRUE(fs::exists(d + "/busy/model.safetensors"));
  EXPECT_EQ(entries_named(d, ".replaced."), 0);
}

// A release stored as FP8 e4m3 with 128x128 block scales (DeepSeek-V3) is written
// dequantised in bfloat16, without quantization_config: each weight is the dequantised
// base weight plus the adapter's correction, rounded once to bfloat16.
TEST(MergeQuantised, Fp8BaseIsWrittenDequantisedInBfloat16) {
  const std::string d = testing::fresh_temp_dir("merge_fp8");
  const ModelFamily& family = family_for("deepseek_v3", "test");
  CausalLM plain(family.tiny(64), kF32);
  init_weights(*plain, 2);
  // The FP8 base: 2-D projections as e4m3 codes with a float32 scale per 128x128 block; the
  // same values, dequantised, into a plain float32 base (exact: a code times a power of two).
  std::vector<testing::RawTensor> raw;
  std::vector<std::pair<std::string, at::Tensor>> dequantised;
  std::set<std::string> fp8_keys;
  at::manual_seed(11);
  for (auto& [key, t] : hub_state_dict(*plain)) {
    const bool quantise = t.dim() == 2 && key.find("embed") == std::string::npos &&
                          key.find("lm_head") == std::string::npos && key.find("mlp.gate.") == std::string::npos;
    if (!quantise) {
      raw.push_back({key, "F32", t.contiguous()});
      dequantised.emplace_back(key, t);
      continue;
    }
    // Codes 0x08..0x37 (positive normals 2^-6 .. 1.875, sign from a coin) and scale 2^-3.
    at::Tensor codes = at::randint(0x08, 0x38, t.sizes(), at::kInt);
    codes = (codes + at::randint(0, 2, t.sizes(), at::kInt) * 0x80).to(at::kByte);
    at::Tensor c = codes.to(at::kInt);
    at::Tensor e = (c.bitwise_and(0x78) / 8).to(at::kDouble), m = c.bitwise_and(7).to(at::kDouble);
    at::Tensor value = (1 + m / 8) * at::pow(2.0, e - 7) * (1 - 2 * (c >= 0x80).to(at::kDouble)) * 0.125;
    const int64_t R = t.size(0), C = t.size(1);
    raw.push_back({key, "F8_E4M3", codes});
    raw.push_back({key + "_scale_inv", "F32", at::full({(R + 127) / 128, (C + 127) / 128}, 0.125, at::kFloat)});
    dequantised.emplace_back(key, value.to(at::kFloat));
    fp8_keys.insert(key);
  }
  ASSERT_GT(fp8_keys.size(), 10u);
  fs::create_directories(d + "/fp8");
  json cfg = plain->config.to_json();
  cfg["torch_dtype"] = "bfloat16";
  cfg["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}};
  std::ofstream(d + "/fp8/config.json") << cfg.dump();
  testing::write_raw_safetensors(d + "/fp8/model.safetensors", raw);
  fs::create_directories(d + "/plain");
  std::ofstream(d + "/plain/config.json") << plain->config.to_json().dump();
  write_checkpoint(d + "/plain", dequantised);
  write_random_adapter(*plain, d + "/adapter", 12);

  MergeReport r = merge_adapter(merge_options(d + "/fp8", d + "/adapter", d + "/merged"));
  EXPECT_TRUE(r.dequantised);
  MergeOptions o = merge_options(d + "/plain", d + "/adapter", d + "/merged_plain");
  o.dtype = "float32";
  merge_adapter(o);
  json written = read_json_file(d + "/merged/config.json");
  EXPECT_FALSE(written.contains("quantization_config"));
  EXPECT_EQ(written["torch_dtype"], "bfloat16");
  CheckpointReader merged(d + "/merged"), reference(d + "/merged_plain");
  EXPECT_EQ(merged.keys(), reference.keys());
  for (const auto& key : merged.keys()) {
    EXPECT_EQ(key.find("scale_inv"), std::string::npos) << key;
    const bool was_fp8 = fp8_keys.count(key) > 0;
    // Quantised weights in bfloat16; the others as stored (float32).
    EXPECT_EQ(merged.info(key).stored_dtype, was_fp8 ? "BF16" : "F32") << key;
    if (was_fp8) EXPECT_TRUE(at::equal(merged.read(key), reference.read(key).to(at::kBFloat16))) << key;
    else EXPECT_TRUE(at::equal(merged.read(key), reference.read(key))) << key;
  }
}

}  // namespace
}  // namespace glint
