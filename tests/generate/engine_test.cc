// The cached generation engine against full recomputation, for every registered family
// at tiny size in float64: the same greedy tokens as greedy_generate_recompute, and at
// every decode step the logits of an independent forward of the request's whole
// sequence, alone and unpadded. Prompts of different lengths share the batch, and rows
// stop at different steps (the cache drops them). Also with a LoRA adapter attached and
// with a multi-tenant bank whose rows carry different adapters. And the memory a decoding
// batch takes against its estimate (train/memory_estimate.h).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "generate/generate.h"
#include "live_bytes.h"
#include "lora/lora.h"
#include "lora/tenants.h"
#include "model/causal_lm.h"
#include "model/decode_cache.h"
#include "model/family.h"
#include "model_util.h"
#include "train/memory_estimate.h"

namespace glint {
namespace {

using glint::testing::kF64;

constexpr int64_t kVocab = 64;

class GenerateFamily : public ::testing::TestWithParam<const ModelFamily*> {};

std::string family_name(const ::testing::TestParamInfo<const ModelFamily*>& info) { return info.param->name(); }

// Prompts of different lengths (19 + 8 new tokens cross DeepSeek-V4's windows and give its
// CSA layers more entries than the indexer keeps).
std::vector<std::vector<int64_t>> prompts() {
  at::Generator gen = at::detail::createCPUGenerator(5);
  std::vector<std::vector<int64_t>> out;
  for (int64_t len : {5, 19, 2, 11}) {
    at::Tensor ids = at::randint(0, kVocab, {len}, gen, at::kLong);
    out.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + len);
  }
  return out;
}

std::vector<GenerationRequest> greedy_requests(const std::vector<int64_t>& max_new, const std::vector<int64_t>& slots = {}) {
  std::vector<GenerationRequest> out;
  auto ps = prompts();
  for (size_t i = 0; i < ps.size(); ++i) {
    GenerationRequest r;
    r.prompt = ps[i];
    r.sampling.max_new_tokens = max_new[i];
    r.sampling.temperature = 0;
    if (!slots.empty()) r.tenant_slot = slots[i];
    out.push_back(r);
  }
  return out;
}

// Logits [n, V] of the whole sequence prompt + tokens (alone, no padding) at the positions
// that predicted each token.
at::Tensor reference_logits(CausalLMImpl& m, const std::vector<int64_t>& prompt, const std::vector<int64_t>& tokens) {
  at::NoGradGuard no_grad;
  std::vector<int64_t> seq = prompt;
  seq.insert(seq.end(), tokens.begin(), tokens.end());
  const int64_t L = int64_t(seq.size()), n = int64_t(tokens.size());
  at::Tensor ids = at::tensor(seq, at::kLong).view({1, L});
  at::Tensor hidden = m.forward(ids, at::arange(L, at::kLong).view({1, L}), at::zeros({1, L}, at::kLong)).hidden;
  return m.logits(hidden[0].narrow(0, int64_t(prompt.size()) - 1, n)).to(at::kDouble);
}

// Every result's logits equal the reference's; `route` sets the adapters of one request
// for its reference forward.
void expect_matches_reference(CausalLMImpl& m, const std::vector<GenerationRequest>& reqs,
                              const std::vector<GenerationResult>& got, const std::string& what,
                              const std::function<void(size_t)>& route = {}) {
  ASSERT_EQ(got.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(int64_t(got[i].tokens.size()), reqs[i].sampling.max_new_tokens) << what << " request " << i;
    if (route) route(i);
    at::Tensor ref = reference_logits(m, reqs[i].prompt, got[i].tokens);
    ASSERT_EQ(got[i].logits.sizes(), ref.sizes()) << what << " request " << i;
    double diff = (got[i].logits - ref).abs().max().item<double>();
    EXPECT_LT(diff, 1e-10) << what << " request " << i << ": decode-step logits differ from a full forward by " << diff;
    at::Tensor greedy = ref.argmax(-1);
    for (size_t t = 0; t < got[i].tokens.size(); ++t)
      EXPECT_EQ(got[i].tokens[t], greedy[t].item<int64_t>()) << what << " request " << i << " token " << t;
  }
}

void randomize_adapters(LoraModel& lora, uint64_t seed) {
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  for (auto& site : lora.sites) site.B().copy_(at::empty(site.B().sizes(), at::kDouble).normal_(0, 0.2, gen));
}

TEST_P(GenerateFamily, CachedGreedyEqualsFullRecomputation) {
  const ModelFamily& f = *GetParam();
  CausalLM m(f.tiny(kVocab), kF64);
  init_weights(*m, 3);
  // Which decoding path each layer takes: its own state, or recomputation over its history.
  std::string paths;
  for (int64_t l = 0; l < m->config.num_hidden_layers; ++l)
    paths += std::string(l ? ", " : "") + (m->layer(l)->self_attn->keeps_decode_state() ? "state" : "history");
  std::cout << "[ path     ] " << f.name() << " layers: " << paths << "\n";
  RecordProperty("decode_paths", paths);
  for (int64_t l = 0; l < m->config.num_hidden_layers; ++l)
    EXPECT_TRUE(m->layer(l)->self_attn->keeps_decode_state())
        << f.name() << " layer " << l << ": every attention keeps a decoding state";

  std::vector<int64_t> max_new = {3, 8, 6, 8};
  auto reqs = greedy_requests(max_new);
  GenerateOptions keep;
  keep.keep_logits = true;
  auto got = generate(*m, reqs, {}, keep);
  expect_matches_reference(*m, reqs, got, f.name());
  // The plain recomputing reference decodes the same tokens.
  auto ps = prompts();
  auto plain = greedy_generate_recompute(*m, ps, 8, /*eos=*/-1, /*pad=*/0);
  for (size_t i = 0; i < ps.size(); ++i)
    EXPECT_EQ(got[i].tokens, std::vector<int64_t>(plain[i].begin(), plain[i].begin() + max_new[i])) << "request " << i;
  // So does the engine's recompute path, logits and all.
  GenerateOptions recompute = keep;
  recompute.recompute = true;
  auto again = generate(*m, reqs, {}, recompute);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(again[i].tokens, got[i].tokens);
    EXPECT_LT((again[i].logits - got[i].logits).abs().max().item<double>(), 1e-10);
  }
}

TEST_P(GenerateFamily, CachedDecodingWithLoraAttached) {
  const ModelFamily& f = *GetParam();
  CausalLM m(f.tiny(kVocab), kF64);
  init_weights(*m, 4);
  LoraOptions o;
  LoraOptions::parse_targets("all", "test", &o);
  o.r = 2;
  o.dtype = at::kDouble;
  LoraModel lora = apply_lora(*m, o, 7);
  randomize_adapters(lora, 8);
  auto reqs = greedy_requests({4, 6, 6, 2});
  GenerateOptions keep;
  keep.keep_logits = true;
  expect_matches_reference(*m, reqs, generate(*m, reqs, {}, keep), f.name() + " with LoRA");
}

TEST_P(GenerateFamily, CachedDecodingMixesTenantsInOneBatch) {
  const ModelFamily& f = *GetParam();
  CausalLM m(f.tiny(kVocab), kF64);
  init_weights(*m, 5);
  TenantBank bank(*m, 3, 2);
  std::vector<int64_t> slot;
  for (const char* name : {"a", "b"}) {
    TenantOptions t;
    t.name = name;
    LoraOptions::parse_targets("all", "test", &t.lora);
    t.lora.r = 2;
    t.lora.dtype = at::kDouble;
    t.seed = slot.size() + 11;
    slot.push_back(bank.add(t));
    randomize_adapters(bank.adapter(slot.back()), 20 + slot.size());
  }
  std::vector<int64_t> slots = {slot[0], slot[1], -1, slot[1]};
  auto reqs = greedy_requests({5, 3, 6, 6}, slots);
  GenerateOptions keep;
  keep.keep_logits = true;
  keep.tenants = &bank;
  auto got = generate(*m, reqs, {}, keep);
  expect_matches_reference(*m, reqs, got, f.name() + " tenants",
                           [&](size_t i) { bank.set_rows(at::tensor(std::vector<int64_t>{slots[i]}, at::kLong)); });
  // The adapters matter: request 3 (tenant b) and the same prompt on the base model differ.
  GenerationRequest base = reqs[3];
  base.tenant_slot = -1;
  auto plain = generate(*m, {base}, {}, keep);
  EXPECT_GT((plain[0].logits[0] - got[3].logits[0]).abs().max().item<double>(), 1e-6);
}

// What a decoding batch holds against the estimate: the cache's state, decoded position by
// position to its capacity, equal to the estimate's, and the peak of a whole generate() call
// within 0.8-1.3x of the estimate's state and working set. In float32, with prompts long
// enough that the prefill, not only the state, counts.
TEST_P(GenerateFamily, DecodingMemoryIsWhatTheEstimateSays) {
  const ModelFamily& f = *GetParam();
  CausalLM m(f.tiny(kVocab), glint::testing::kF32);
  init_weights(*m, 6);
  const int64_t rows = 4, prompt = 48, max_new = 80;
  DecodeInputs in;
  in.rows = rows;
  in.positions = prompt + max_new;
  in.prompt = prompt;
  in.dtype_bytes = 4;
  const DecodeEstimate e = estimate_decode_memory(*m, in);
  {
    at::NoGradGuard no_grad;
    DecodeCache cache(rows, c10::Device(c10::kCPU), in.positions);
    at::Tensor ids = at::randint(0, kVocab, {rows, prompt}, at::kLong);
    m->forward(ids, at::arange(prompt, at::kLong).expand({rows, prompt}), at::zeros({rows, prompt}, at::kLong), &cache);
    for (int64_t p = prompt; p < in.positions; ++p)
      m->forward(at::randint(0, kVocab, {rows, 1}, at::kLong), at::full({rows, 1}, p, at::kLong),
                 at::zeros({rows, 1}, at::kLong), &cache);
    const double held = double(cache.bytes()) / (1 << 20);
    std::printf("[ state    ] %s: %d rows x %d positions: estimated %.3f MB, held %.3f MB (%.2fx)\n", f.name().c_str(),
                int(rows), int(in.positions), e.state_mb, held, e.state_mb / held);
    EXPECT_NEAR(held, e.state_mb, 1e-9 * held) << e.line(in);
  }
  std::vector<GenerationRequest> reqs;
  at::Generator gen = at::detail::createCPUGenerator(9);
  for (int64_t r = 0; r < rows; ++r) {
    GenerationRequest q;
    at::Tensor ids = at::randint(0, kVocab, {prompt - r}, gen, at::kLong);
    q.prompt.assign(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    q.sampling.max_new_tokens = max_new + r;
    q.sampling.temperature = 0;
    reqs.push_back(q);
  }
  double peak = 0;
  {
    glint::testing::LiveBytes live;
    generate(*m, reqs);
    peak = live.peak_mb();
  }
  const double said = e.state_mb + e.working_mb;
  std::printf("[ peak     ] %s: estimated %.3f MB (state %.3f + working %.3f), measured %.3f MB (%.2fx)\n",
              f.name().c_str(), said, e.state_mb, e.working_mb, peak, said / peak);
  EXPECT_GE(said, 0.8 * peak) << e.line(in);
  EXPECT_LE(said, 1.3 * peak) << e.line(in);
}

INSTANTIATE_TEST_SUITE_P(Registry, GenerateFamily, ::testing::ValuesIn(model_families()), family_name);

}  // namespace
}  // namespace glint
