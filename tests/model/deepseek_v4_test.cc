// DeepSeek-V4 against the independent float64 reference (tests/model/reference_deepseek_v4.h):
// logits of a model with every layer kind (sliding window, compressed sparse with its
// indexer, heavily compressed), hash and biased routing and hyper-connections; gradients of
// the new parts by finite differences; packed sequences; the released checkpoint's key
// names with FP8 (E8M0 block scales) and FP4 experts; the config's spellings.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <fstream>
#include <map>
#include <regex>

#include "core/error.h"
#include "io/model_files.h"
#include "io/raw_safetensors.h"
#include "lora/lora.h"
#include "model/causal_lm.h"
#include "model/decode_cache.h"
#include "model/deepseek_v4/attention.h"
#include "model/deepseek_v4/family.h"
#include "model/reference_deepseek_v4.h"
#include "model/weights.h"
#include "model_util.h"
#include "test_util.h"
#include "model/deepseek_v4/config.h"

namespace glint {
namespace {

using glint::testing::max_rel_err;

using glint::testing::kF64;
using glint::testing::positions;
using glint::testing::logits_of;

using nlohmann::json;
constexpr int64_t kV4Vocab = 40;

json v4_json() {
  json j = deepseek_v4_family().tiny(kV4Vocab).to_json();
  j["index_n_heads"] = 4;  // several index heads: exact ties of ReLU scores become unlikely
  return j;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Weights of a useful size: matrices ~ 1/sqrt(fan-in), norms around 1, other vectors
// (sinks, HC bases and scales, correction biases) spread out. The hash tables keep
// init_weights' draw.
void randomize_v4(CausalLMImpl& m, uint64_t seed) {
  init_weights(m, seed);
  at::NoGradGuard ng;
  at::manual_seed(seed);
  for (auto& item : m.named_parameters()) {
    at::Tensor p = item.value();
    at::Tensor r = at::randn(p.sizes(), p.options());
    if (p.dim() >= 2) p.copy_(r / std::sqrt(double(p.size(-1))));
    else if (ends_with(item.key(), "norm.weight")) p.copy_(1.0 + 0.1 * r);
    else p.copy_(0.5 * r);
  }
  for (auto& item : m.named_buffers())
    if (item.value().is_floating_point()) item.value().copy_(0.2 * at::randn(item.value().sizes(), item.value().options()));
}

// The test config with a sliding window of `window` tokens (0: none).
json v4_window_json(int64_t window) {
  json j = v4_json();
  j["sliding_window"] = window > 0 ? json(window) : json(nullptr);
  return j;
}

// Every tensor of the model under transformers' names.
std::map<std::string, at::Tensor> hf_weights(CausalLMImpl& m) {
  std::map<std::string, at::Tensor> out;
  for (auto& item : m.named_parameters()) out[item.key()] = item.value().detach();
  for (auto& item : m.named_buffers()) out[item.key()] = item.value().detach();
  return out;
}


TEST(DeepseekV4, LogitsMatchTheNaiveReference) {
  // Query blocks of 128 (the default: one block here) and of 4 (several, the last one
  // part padding, each reading the window's keys that reach back into earlier blocks).
  for (auto [window, query_block] : {std::pair<int64_t, int64_t>{6, 128}, {0, 128}, {6, 4}, {0, 4}}) {
    SCOPED_TRACE("sliding_window " + std::to_string(window) + ", query_block " + std::to_string(query_block));
    json j = v4_window_json(window);
    CausalLM m(ModelConfig::from_json(j, "test config"), kF64);
    randomize_v4(*m, 1 + window);
    for (int64_t l = 0; l < m->config.num_hidden_layers; ++l)
      m->layer(l)->attention<DeepseekV4AttentionImpl>()->query_block = query_block;
    // 21 tokens: 5 CSA windows of 4 (one token left over), 2 HCA windows of 8, more
    // entries than index_topk (3), and a window of 6 that cuts the sliding keys.
    at::Tensor ids = at::randint(0, kV4Vocab, {2, 21}, at::kLong);
    at::NoGradGuard ng;
    at::Tensor got = logits_of(*m, ids, positions(ids), at::zeros_like(ids));
    at::Tensor want = testing::deepseek_v4_reference_logits(j, hf_weights(*m), ids);
    double err = max_rel_err(got, want);
    EXPECT_LT(err, 1e-10) << "largest relative difference " << err;
  }
}

TEST(DeepseekV4, PackedSequencesEqualEachSequenceAlone) {
  CausalLM m(ModelConfig::from_json(v4_json(), "test config"), kF64);
  randomize_v4(*m, 3);
  at::NoGradGuard ng;
  // One row: a sequence of 13 tokens, one of 9, then 2 padding tokens.
  const int64_t a = 13, b = 9, S = 24;
  at::Tensor ids = at::randint(0, kV4Vocab, {1, S}, at::kLong);
  std::vector<int64_t> seg(S, -1), pos(S, 0);
  for (int64_t t = 0; t < a; ++t) seg[t] = 0, pos[t] = t;
  for (int64_t t = 0; t < b; ++t) seg[a + t] = 1, pos[a + t] = t;
  at::Tensor packed = logits_of(*m, ids, at::tensor(pos).view({1, S}), at::tensor(seg).view({1, S}));
  for (auto [start, len] : {std::pair<int64_t, int64_t>{0, a}, {a, b}}) {
    at::Tensor one = ids.narrow(1, start, len);
    at::Tensor alone = logits_of(*m, one, positions(one), at::zeros_like(one));
    double err = max_rel_err(packed.narrow(1, start, len), alone);
    EXPECT_LT(err, 1e-12) << "sequence at " << start << ": largest relative difference " << err;
  }
  EXPECT_TRUE(at::isfinite(packed).all().item<bool>());
}

// d(loss)/d(parameter entries) by central differences against autograd, for the parts
// new in this family: hyper-connection mixing and head, sinks, the compressors' pooling,
// the sqrt(softplus) router (biased and hash layers), the clamped experts.
TEST(DeepseekV4, GradientsMatchFiniteDifferences) {
  json j = v4_json();
  j["swiglu_limit"] = 0.5;  // some gates and ups clamp: the clamp's gradient is exercised
  CausalLM m(ModelConfig::from_json(j, "test config"), kF64);
  randomize_v4(*m, 5);
  at::Tensor ids = at::randint(0, kV4Vocab, {1, 17}, at::kLong);
  at::Tensor probe = at::randn({1, 17, kV4Vocab}, at::kDouble);
  auto loss = [&]() { return (logits_of(*m, ids, positions(ids), at::zeros_like(ids)) * probe).sum(); };
  loss().backward();
  std::map<std::string, at::Tensor> params;
  for (auto& item : m->named_parameters()) params[item.key()] = item.value();
  const std::vector<std::string> names = {
      "model.layers.0.attn_hc.fn",         "model.layers.1.attn_hc.scale",
      "model.layers.2.ffn_hc.base",        "model.hc_head.hc_fn",
      "model.hc_head.hc_scale",            "model.layers.1.self_attn.sinks",
      "model.layers.1.self_attn.compressor.position_bias",
      "model.layers.2.self_attn.compressor.gate_proj.weight",
      "model.layers.0.mlp.gate.weight",    "model.layers.3.mlp.gate.weight",
      "model.layers.3.mlp.experts.gate_up_proj", "model.layers.3.mlp.shared_experts.up_proj.weight"};
  at::manual_seed(11);
  for (const auto& name : names) {
    ASSERT_TRUE(params.count(name)) << name;
    at::Tensor p = params[name];
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_GT(p.grad().abs().max().item<double>(), 0.0) << name << " gets no gradient";
    for (int k = 0; k < 3; ++k) {
      int64_t i = at::randint(0, p.numel(), {1}, at::kLong).item<int64_t>();
      at::Tensor flat = p.detach().view({-1});
      const double h = 1e-6, x0 = flat[i].item<double>();
      double up, down;
      {
        at::NoGradGuard ng;
        flat[i] = x0 + h;
        up = loss().item<double>();
        flat[i] = x0 - h;
        down = loss().item<double>();
        flat[i] = x0;
      }
      double fd = (up - down) / (2 * h), ad = p.grad().view({-1})[i].item<double>();
      EXPECT_NEAR(ad, fd, 1e-6 * std::max(1.0, std::abs(fd))) << name << "[" << i << "]";
    }
  }
}

// --- the released checkpoint's form -------------------------------------------------

// transformers' name -> the release's, written from the release's key inventory.
std::string released_name(const std::string& hf) {
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex("^model\\.embed_tokens\\.weight$"), "embed.weight"},
      {std::regex("^lm_head\\.weight$"), "head.weight"},
      {std::regex("^model\\.norm\\.weight$"), "norm.weight"},
      {std::regex("^model\\.hc_head\\.hc_(fn|base|scale)$"), "hc_head_$1"},
      {std::regex("^model\\.layers\\.(\\d+)\\.input_layernorm\\."), "layers.$1.attn_norm."},
      {std::regex("^model\\.layers\\.(\\d+)\\.post_attention_layernorm\\."), "layers.$1.ffn_norm."},
      {std::regex("^model\\.layers\\.(\\d+)\\.attn_hc\\.(fn|base|scale)$"), "layers.$1.hc_attn_$2"},
      {std::regex("^model\\.layers\\.(\\d+)\\.ffn_hc\\.(fn|base|scale)$"), "layers.$1.hc_ffn_$2"},
      {std::regex("^model\\.layers\\.(\\d+)\\.self_attn\\.sinks$"), "layers.$1.attn.attn_sink"},
      {std::regex("^model\\.layers\\.(\\d+)\\.self_attn\\.compressor\\.indexer\\.scorer\\.weights_proj\\."),
       "layers.$1.attn.indexer.weights_proj."},
      {std::regex("^model\\.layers\\.(\\d+)\\.self_attn\\.compressor\\.indexer\\.q_b_proj\\."),
       "layers.$1.attn.indexer.wq_b."},
      {std::regex("^model\\.layers\\.(\\d+)\\.self_attn\\.compressor\\.indexer\\."), "layers.$1.attn.indexer.compressor."},
      {std::regex("^model\\.layers\\.(\\d+)\\.self_attn\\.compressor\\."), "layers.$1.attn.compressor."},
      {std::regex("^model\\.layers\\.(\\d+)\\.self_attn\\.q_a_norm\\."), "layers.$1.attn.q_norm."},
      {std::regex("^model\\.layers\\.(\\d+)\\.self_attn\\."), "layers.$1.attn."},
      {std::regex("^model\\.layers\\.(\\d+)\\.mlp\\.gate\\.e_score_correction_bias$"), "layers.$1.ffn.gate.bias"},
      {std::regex("^model\\.layers\\.(\\d+)\\.mlp\\."), "layers.$1.ffn."},
  };
  static const std::vector<std::pair<std::regex, std::string>> leaves = {
      {std::regex("\\.q_a_proj\\."), ".wq_a."},     {std::regex("\\.q_b_proj\\."), ".wq_b."},
      {std::regex("attn\\.kv_proj\\."), "attn.wkv."}, {std::regex("compressor\\.kv_proj\\."), "compressor.wkv."},
      {std::regex("compressor\\.gate_proj\\."), "compressor.wgate."}, {std::regex("compressor\\.kv_norm\\."), "compressor.norm."},
      {std::regex("compressor\\.position_bias$"), "compressor.ape"},
      {std::regex("\\.o_a_proj\\."), ".wo_a."},     {std::regex("\\.o_b_proj\\."), ".wo_b."},
      {std::regex("\\.gate_proj\\."), ".w1."},      {std::regex("\\.down_proj\\."), ".w2."},
      {std::regex("\\.up_proj\\."), ".w3."}};
  std::string out = hf;
  for (const auto& [re, to] : rules)
    if (std::regex_search(out, re)) {
      out = std::regex_replace(out, re, to);
      break;
    }
  for (const auto& [re, to] : leaves) out = std::regex_replace(out, re, to);
  return out;
}

// Format tables (io/quantized.h's legend): a few E4M3 codes with their values, every E2M1.
const std::vector<std::pair<uint8_t, double>> kE4m3 = {{0x38, 1.0}, {0x40, 2.0}, {0xB8, -1.0},
                                                       {0x3C, 1.5}, {0x30, 0.5}, {0xB4, -0.75}};
const double kE2m1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

// W [R, C] as F8_E4M3 codes with one E8M0 scale per 128x128 block; *value gets the numbers.
std::pair<at::Tensor, at::Tensor> fp8_weight(int64_t R, int64_t C, at::Tensor* value) {
  at::Tensor pick = at::randint(0, int64_t(kE4m3.size()), {R, C}, at::kLong);
  at::Tensor codes = at::empty({R, C}, at::kByte);
  *value = at::empty({R, C}, at::kDouble);
  const int64_t br = (R + 127) / 128, bc = (C + 127) / 128;
  at::Tensor scale = at::randint(124, 131, {br, bc}, at::kLong).to(at::kByte);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t k = 0; k < C; ++k) {
      auto [code, v] = kE4m3[pick[i][k].item<int64_t>()];
      codes[i][k] = int64_t(code);
      (*value)[i][k] = v * std::ldexp(1.0, int(scale[i / 128][k / 128].item<int64_t>()) - 127);
    }
  return {codes, scale};
}

// W [R, C] as two E2M1 codes per byte (low nibble: even column) with E8M0 scales per 1x32.
std::pair<at::Tensor, at::Tensor> fp4_weight(int64_t R, int64_t C, at::Tensor* value) {
  at::Tensor nib = at::randint(0, 16, {R, C}, at::kLong);
  at::Tensor scale = at::randint(125, 130, {R, C / 32}, at::kLong).to(at::kByte);
  at::Tensor packed = (nib.slice(1, 0, C, 2) + 16 * nib.slice(1, 1, C, 2)).to(at::kByte);
  *value = at::empty({R, C}, at::kDouble);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t k = 0; k < C; ++k)
      (*value)[i][k] = kE2m1[nib[i][k].item<int64_t>()] *
                       std::ldexp(1.0, int(scale[i][k / 32].item<int64_t>()) - 127);
  return {packed, scale};
}

// A checkpoint in the release's form (its key names, FP8 linears with E8M0 block scales,
// FP4 routed experts, an MTP tensor) written to `dir`; returns the model's config json and
// fills *want with the numbers the loader must produce. `corrupt` may edit the tensors.
json write_release(const std::string& dir, std::map<std::string, at::Tensor>* want,
                   const std::function<void(std::vector<testing::RawTensor>&)>& corrupt = {}) {
  json j = v4_json();
  j["moe_intermediate_size"] = 32;  // FP4 rows hold a multiple of 32 values
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"};
  j["mlp_layer_types"] = {"hash_moe", "moe", "moe"};
  CausalLM m(ModelConfig::from_json(j, "test config"), kF64);
  randomize_v4(*m, 7);
  const ModelConfig& c = m->config;
  std::vector<testing::RawTensor> disk;
  *want = hf_weights(*m);
  at::manual_seed(13);
  for (auto& [hf, t] : *want) {
    const std::string name = released_name(hf);
    if (ends_with(hf, "mlp.experts.gate_up_proj") || ends_with(hf, "mlp.experts.down_proj")) {
      const bool gate_up = ends_with(hf, "gate_up_proj");
      const std::string layer = name.substr(0, name.find(".ffn.") + 5);  // "layers.L.ffn."
      const int64_t I = c.moe_intermediate_size;
      for (int64_t e = 0; e < c.num_experts; ++e) {
        std::vector<std::pair<std::string, at::Tensor>> parts;
        if (gate_up) parts = {{"w1", t[e].narrow(0, 0, I)}, {"w3", t[e].narrow(0, I, I)}};
        else parts = {{"w2", t[e]}};
        for (auto& [proj, slice] : parts) {
          at::Tensor value;
          auto [packed, scale] = fp4_weight(slice.size(0), slice.size(1), &value);
          slice.copy_(value);
          const std::string key = layer + "experts." + std::to_string(e) + "." + proj;
          disk.push_back({key + ".weight", "I8", packed.to(at::kChar)});
          disk.push_back({key + ".scale", "F8_E8M0", scale});
        }
      }
      continue;
    }
    const bool fp8 = t.dim() == 2 && ends_with(hf, ".weight") &&
                     (hf.find("q_a_proj") != std::string::npos || hf.find("o_b_proj") != std::string::npos ||
                      hf.find("shared_experts.down_proj") != std::string::npos);
    if (fp8) {
      at::Tensor value;
      auto [codes, scale] = fp8_weight(t.size(0), t.size(1), &value);
      t.copy_(value);
      const std::string stem = name.substr(0, name.size() - 7);  // drop ".weight"
      disk.push_back({name, "F8_E4M3", codes});
      disk.push_back({stem + ".scale", "F8_E8M0", scale});
      continue;
    }
    if (t.is_floating_point()) {
      t.copy_(t.to(at::kFloat).to(at::kDouble));  // stored as float32
      disk.push_back({name, "F32", t.to(at::kFloat)});
    } else {
      disk.push_back({name, "I64", t.to(at::kLong)});
    }
  }
  disk.push_back({"mtp.0.embed.weight", "F32", at::zeros({4}, at::kFloat)});  // skipped
  if (corrupt) corrupt(disk);
  testing::write_raw_safetensors(dir + "/model.safetensors", disk);
  json cfg = j;
  cfg["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                                {"weight_block_size", {128, 128}}};
  cfg["compress_ratios"] = {0, 4, 128, 0};  // ignored: layer_types wins
  std::ofstream(dir + "/config.json") << cfg.dump();
  return j;
}

TEST(DeepseekV4, ReleasedCheckpointWithFp8AndFp4Loads) {
  const std::string dir = testing::fresh_temp_dir("dsv4_release");
  std::map<std::string, at::Tensor> want;
  json j = write_release(dir, &want);
  CausalLM loaded = from_pretrained(dir, kF64);
  std::map<std::string, at::Tensor> got = hf_weights(*loaded);
  ASSERT_EQ(got.size(), want.size());
  for (auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_TRUE(at::equal(got[name].to(at::kDouble), t.to(at::kDouble))) << name;
  }
  // Ranges of the flattened parameters (what an FSDP rank reads), mid-row and mid-block,
  // through the release's names: FP8, FP4 per-expert keys, plain.
  auto ckpt = open_checkpoint(dir, loaded->config);
  for (const auto& site : parameter_sites(*loaded)) {
    const int64_t n = site.tensor.numel();
    const int64_t tail = std::min<int64_t>(5, n);
    for (auto [start, count] : std::vector<std::pair<int64_t, int64_t>>{{0, n}, {n / 3, n / 3}, {n - tail, tail}}) {
      at::Tensor range = read_parameter_range(*ckpt, site, site.tensor.sizes(), start, count, at::kDouble);
      EXPECT_TRUE(at::equal(range, site.tensor.detach().reshape({-1}).narrow(0, start, count)))
          << site.name << " [" << start << ", +" << count << ")";
    }
  }
  at::Tensor ids = at::randint(0, kV4Vocab, {1, 19}, at::kLong);
  at::NoGradGuard ng;
  double err = max_rel_err(logits_of(*loaded, ids, positions(ids), at::zeros_like(ids)),
                       testing::deepseek_v4_reference_logits(j, want, ids));
  EXPECT_LT(err, 1e-10);
}

// A corrupted scale (the E8M0 NaN code) or a missing one is an error naming the key, not
// numbers read as if nothing were wrong.
TEST(DeepseekV4, ReleasedCheckpointWithABadScaleIsAClearError) {
  std::map<std::string, at::Tensor> want;
  auto expect = [&](const std::string& name, const std::string& key,
                    const std::function<void(std::vector<testing::RawTensor>&)>& corrupt) {
    const std::string dir = testing::fresh_temp_dir(name);
    write_release(dir, &want, corrupt);
    testing::expect_error_naming([&] { from_pretrained(dir, kF64); }, key);
  };
  auto find = [](std::vector<testing::RawTensor>& disk, const std::string& name) -> testing::RawTensor& {
    for (auto& r : disk)
      if (r.name == name) return r;
    throw std::runtime_error("no tensor " + name);
  };
  expect("dsv4_nan_fp4_scale", "model.layers.1.mlp.experts.3.up_proj.weight", [&](auto& disk) {
    find(disk, "layers.1.ffn.experts.3.w3.scale").t[0][0] = 0xFF;
  });
  expect("dsv4_nan_fp8_scale", "model.layers.2.self_attn.q_a_proj.weight", [&](auto& disk) {
    find(disk, "layers.2.attn.wq_a.scale").t[0][0] = 0xFF;
  });
  expect("dsv4_no_fp8_scale", "model.layers.0.self_attn.o_b_proj.weight", [&](auto& disk) {
    disk.erase(std::remove_if(disk.begin(), disk.end(), [](const auto& r) { return r.name == "layers.0.attn.wo_b.scale"; }),
               disk.end());
  });
}

// The PEFT names of a compressed sparse layer's adapted linears (family_test pins the
// first layer's): its compressor's and its indexer's, in module order.
TEST(DeepseekV4, PeftNamesOfACompressedSparseLayer) {
  CausalLM m(ModelConfig::from_json(v4_json(), "test config"), kF64);
  LoraOptions o;
  LoraOptions::parse_targets("all", "t", &o);
  LoraModel lora = make_lora(*m, o, 1);
  std::vector<std::string> got;
  for (const auto& s : lora.sites) {
    const std::string prefix = "model.layers.1.", name = s.module_path + (s.parameter.empty() ? "" : "." + s.parameter);
    if (name.rfind(prefix, 0) == 0) got.push_back(name.substr(prefix.size()));
  }
  const std::vector<std::string> want = {
      "self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_proj", "self_attn.o_a_proj", "self_attn.o_b_proj",
      "self_attn.compressor.kv_proj", "self_attn.compressor.gate_proj", "self_attn.compressor.indexer.kv_proj",
      "self_attn.compressor.indexer.gate_proj", "self_attn.compressor.indexer.q_b_proj",
      "self_attn.compressor.indexer.scorer.weights_proj", "mlp.experts.gate_up_proj", "mlp.experts.down_proj",
      "mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj", "mlp.shared_experts.down_proj"};
  EXPECT_EQ(got, want);
}

TEST(DeepseekV4, ConfigSpellingsAgree) {
  json base = v4_json();
  const ModelConfig a = ModelConfig::from_json(base, "a");
  // The legacy per-layer ratios (only 0, 4 and 128) and num_hash_layers.
  json legacy = base;
  legacy.erase("layer_types");
  legacy.erase("mlp_layer_types");
  legacy.erase("compress_rates");
  legacy["compress_ratios"] = {0, 4, 128, 4, 0};  // one entry past the layers (the MTP layer): cut
  legacy["num_hash_layers"] = 1;
  const ModelConfig b = ModelConfig::from_json(legacy, "b");
  EXPECT_EQ(b.layer_types, a.layer_types);
  EXPECT_EQ(b.mlp_layer_types, a.mlp_layer_types);
  EXPECT_EQ(v4(b).compress_rate_hca, 128);
  // v5's nested RoPE sets.
  json nested = base;
  nested.erase("rope_scaling");
  nested.erase("rope_theta");
  nested.erase("compress_rope_theta");
  nested.erase("partial_rotary_factor");
  nested["rope_parameters"] = {
      {"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}}},
      {"compress",
       {{"rope_type", "yarn"}, {"rope_theta", 160000.0}, {"partial_rotary_factor", 0.5}, {"factor", 4.0},
        {"original_max_position_embeddings", 1024}, {"beta_fast", 32}, {"beta_slow", 1}}}};
  const ModelConfig n = ModelConfig::from_json(nested, "nested");
  EXPECT_EQ(n.to_json(), a.to_json());
  EXPECT_EQ(n.rope_scaling.attention_factor, 1.0);
  // The round trip.
  EXPECT_EQ(ModelConfig::from_json(a.to_json(), "again").to_json(), a.to_json());
}

TEST(DeepseekV4, BadConfigsAreNamed) {
  auto expect = [](json j, const std::string& what) {
    testing::expect_error_naming([&] { ModelConfig::from_json(j, "cfg.json"); }, what);
  };
  json j = v4_json();
  j.erase("layer_types");
  j["compress_ratios"] = {0, 4, 64, 0};
  expect(j, "compress_ratios");
  j = v4_json();
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "sliding_attention"};
  expect(j, "full_attention");
  j = v4_json();
  j["layer_types"] = {"sliding_attention"};
  expect(j, "layer_types");
  j = v4_json();
  j["o_groups"] = 3;
  expect(j, "o_groups");
  j = v4_json();
  j["scoring_func"] = "softmax";
  expect(j, "scoring_func");
  j = v4_json();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}};
  expect(j, "weight_block_size");
}

// Cached decoding against full recomputation, with a decoding state that crosses every
// boundary many times: a window of 5, CSA blocks of 4 (the indexer choosing 3 of up to a
// dozen entries), HCA blocks of 8. Four rows of different prompt lengths (mid-block, on a
// block boundary, on the point where the indexer starts to choose, one token), decoding
// ~40 tokens one or several at a time (rows feeding different counts, right padded), with
// rows dropped and reordered mid-way. Every new token's logits equal those of a forward
// of its row's whole sequence. Without a window the module falls back to recomputation,
// which must agree too.
TEST(DeepseekV4, CachedDecodingEqualsRecomputationAcrossBlocks) {
  for (int64_t window : {5, 0}) {
    SCOPED_TRACE("sliding_window " + std::to_string(window));
    CausalLM m(ModelConfig::from_json(v4_window_json(window), "test config"), kF64);
    randomize_v4(*m, 7 + window);
    for (int64_t l = 0; l < m->config.num_hidden_layers; ++l)
      EXPECT_EQ(m->layer(l)->self_attn->keeps_decode_state(), window > 0) << "layer " << l;
    at::NoGradGuard ng;
    at::Generator gen = at::detail::createCPUGenerator(11);
    const std::vector<int64_t> prompt = {7, 8, 12, 1};
    const int64_t B = int64_t(prompt.size()), total = 56;
    at::Tensor seqs = at::randint(0, kV4Vocab, {B, total}, gen, at::kLong);  // row r's whole sequence
    std::vector<at::Tensor> got(B);  // [total, V]: logits at each position, as they came
    for (auto& g : got) g = at::full({total, kV4Vocab}, std::nan(""), at::kDouble);

    DecodeCache cache(B, c10::Device(c10::kCPU));
    std::vector<int64_t> rows = {0, 1, 2, 3};  // the cache's rows, as indices of seqs
    std::vector<int64_t> done(prompt);         // tokens fed per sequence
    // One forward of counts[k] new tokens for cache row k (right padded).
    auto feed = [&](const std::vector<int64_t>& counts) {
      const int64_t R = int64_t(rows.size()), S = *std::max_element(counts.begin(), counts.end());
      at::Tensor ids = at::zeros({R, S}, at::kLong), pos = at::zeros({R, S}, at::kLong), seg = at::full({R, S}, -1, at::kLong);
      for (int64_t k = 0; k < R; ++k) {
        const int64_t r = rows[k], from = cache.lengths()[k];
        ids[k].narrow(0, 0, counts[k]).copy_(seqs[r].narrow(0, from, counts[k]));
        pos[k].narrow(0, 0, counts[k]).copy_(at::arange(from, from + counts[k], at::kLong));
        seg[k].narrow(0, 0, counts[k]).fill_(0);
      }
      std::vector<int64_t> before = cache.lengths();
      at::Tensor logits = m->logits(m->forward(ids, pos, seg, &cache).hidden);  // [R,S,V]
      for (int64_t k = 0; k < R; ++k) {
        got[rows[k]].narrow(0, before[k], counts[k]).copy_(logits[k].narrow(0, 0, counts[k]));
        done[rows[k]] = before[k] + counts[k];
      }
    };
    feed(prompt);  // the prefill
    for (int64_t step = 0; step < 40; ++step) {
      if (step == 17) {  // row 1 (sequence 1) finishes; the others are reordered
        cache.keep_rows({3, 0, 2});
        rows = {3, 0, 2};
      }
      std::vector<int64_t> counts(rows.size(), 1);
      if (step % 7 == 3)  // several tokens at once, a different count per row
        for (size_t k = 0; k < rows.size(); ++k) counts[k] = 1 + int64_t((k + step) % 3);
      for (size_t k = 0; k < rows.size(); ++k) counts[k] = std::min(counts[k], total - done[rows[k]]);
      if (*std::max_element(counts.begin(), counts.end()) == 0) break;
      for (auto& c : counts) c = std::max<int64_t>(c, 0);
      feed(counts);
    }
    for (int64_t r = 0; r < B; ++r) {
      SCOPED_TRACE("sequence " + std::to_string(r));
      ASSERT_GT(done[r], prompt[r] + 15);
      at::Tensor ids = seqs[r].narrow(0, 0, done[r]).view({1, done[r]});
      at::Tensor want = logits_of(*m, ids, positions(ids), at::zeros_like(ids))[0];
      double diff = (got[r].narrow(0, 0, done[r]) - want).abs().max().item<double>();
      EXPECT_LT(diff, 1e-10) << "cached logits differ from a full forward by " << diff;
    }
  }
}

}  // namespace
}  // namespace glint
