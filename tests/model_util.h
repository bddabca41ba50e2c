// Helpers shared by the tests that build models: the CPU placements they build them in,
// and one forward pass to logits.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "model/layers.h"
#include "io/model_files.h"
#include "model/weights.h"
#include "test_util.h"

namespace glint::testing {

inline const TensorPlacement kF64{at::kDouble, c10::Device(c10::kCPU)};
inline const TensorPlacement kF32{at::kFloat, c10::Device(c10::kCPU)};

// Positions 0..S-1 of every row of ids [B,S].
inline at::Tensor positions(const at::Tensor& ids) {
  return at::arange(ids.size(1), at::kLong).repeat({ids.size(0), 1});
}

// The logits [B,S,V] of ids [B,S] at positions `pos` in segments `seg`.
inline at::Tensor logits_of(CausalLMImpl& m, const at::Tensor& ids, const at::Tensor& pos, const at::Tensor& seg) {
  return m.logits(m.forward(ids, pos, seg).hidden);
}

// The logits of ids [B,S]: one sequence per row at positions 0..S-1.
inline at::Tensor logits_of(CausalLMImpl& m, const at::Tensor& ids) {
  return logits_of(m, ids, positions(ids), at::zeros_like(ids));
}

// A named edit of a config.json, for tests that run one check over several configs.
struct ConfigVariant {
  const char* name;
  std::function<void(nlohmann::json&)> edit;
};

// Every parameter random around its initialisation (0.3 randn, plus 1 for vectors: norm
// weights around 1), every buffer (router correction biases) 0.3 randn, negative ones among them.
inline void randomize_around_init(CausalLMImpl& m, uint64_t seed) {
  at::NoGradGuard ng;
  at::manual_seed(seed);
  for (auto& p : m.parameters()) p.copy_(at::randn(p.sizes(), p.options()) * 0.3 + (p.dim() == 1 ? 1.0 : 0.0));
  for (auto& b : m.buffers()) b.copy_(at::randn(b.sizes(), b.options()) * 0.3);
}

// The model's tensors under the Hub names, in float64 (the reference implementations' input).
inline std::map<std::string, at::Tensor> hub_weights_f64(CausalLMImpl& m) {
  std::map<std::string, at::Tensor> out;
  for (auto& [k, t] : hub_state_dict(m)) out[k] = t.to(at::kDouble);
  return out;
}

// max |got - want| / max |want|.
inline double max_rel_err(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).abs().max().item<double>() / std::max(want.abs().max().item<double>(), 1e-300);
}

// For each variant of config `base` (seeds seed+1, seed+2, ...): a float64 model with
// weights random around their initialisation, whose logits of random ids [2,9] must equal
// `reference`(config, Hub tensors in float64, ids) to 1e-10 relative, and whose step-1
// loss (mean next-token cross-entropy) must equal the one of the reference's logits.
using ReferenceLogits = std::function<at::Tensor(const nlohmann::json&, const std::map<std::string, at::Tensor>&,
                                                 const at::Tensor&)>;
inline void expect_variants_match_reference(const nlohmann::json& base, const std::vector<ConfigVariant>& variants,
                                            uint64_t seed, const ReferenceLogits& reference) {
  for (const auto& v : variants) {
    SCOPED_TRACE(v.name);
    nlohmann::json j = base;
    v.edit(j);
    CausalLM m(ModelConfig::from_json(j, "test config"), kF64);
    randomize_around_init(*m, ++seed);
    const int64_t V = m->config.vocab_size;
    at::Tensor ids = at::randint(0, V, {2, 9}, at::kLong);
    at::NoGradGuard ng;
    at::Tensor got = logits_of(*m, ids);
    at::Tensor want = reference(j, hub_weights_f64(*m), ids);
    ASSERT_EQ(got.sizes(), want.sizes());
    const double err = max_rel_err(got, want);
    EXPECT_LT(err, 1e-10) << "largest relative difference " << err;
    at::Tensor lp = at::log_softmax(want.narrow(1, 0, 8), -1);
    const double want_loss = -lp.gather(-1, ids.narrow(1, 1, 8).unsqueeze(-1)).mean().item<double>();
    LossParts loss = causal_lm_loss(*m, ids, ids, positions(ids), at::zeros_like(ids));
    EXPECT_NEAR(loss.ce_sum.item<double>() / double(2 * 8), want_loss, 1e-10 * std::abs(want_loss));
  }
}

// A release's tensors the family must skip (a multi-token-prediction layer after the
// decoder's): m's Hub tensors plus `skipped` (4x4 each), written with m's config.json to
// dir/model, load into a model with m's logits; with one more key the model has no use for
// (dir/bad), loading fails naming it.
inline void expect_skipped_when_loading(CausalLMImpl& m, const std::string& dir,
                                        const std::vector<std::string>& skipped) {
  std::vector<std::pair<std::string, at::Tensor>> tensors = hub_state_dict(m);
  for (const std::string& k : skipped) tensors.emplace_back(k, at::randn({4, 4}, at::kDouble));
  auto write = [&](const std::string& to) {
    std::filesystem::create_directories(to);
    std::ofstream(to + "/config.json") << m.config.to_json().dump();
    write_checkpoint(to, tensors);
  };
  write(dir + "/model");
  CausalLM loaded = from_pretrained(dir + "/model", kF64);
  at::Tensor ids = at::randint(0, m.config.vocab_size, {1, 5}, at::kLong);
  {
    at::NoGradGuard ng;
    EXPECT_TRUE(at::equal(logits_of(*loaded, ids), logits_of(m, ids)));
  }
  const std::string unknown = "model.layers.1.self_attn.extra.weight";
  tensors.emplace_back(unknown, at::zeros({2}, at::kDouble));
  write(dir + "/bad");
  expect_error_naming([&] { from_pretrained(dir + "/bad", kF64); },
                      unknown);
}

}  // namespace glint::testing
