// Sampling in the generation engine: determinism per request whatever shares the batch,
// top-k = 1 and a tiny top-p reduce to greedy, log-probabilities of the raw distribution
// (checked against an independent full forward), stop tokens, prompt log-probabilities,
// and errors that name the request and field.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "generate/generate.h"
#include "generate/sampling.h"
#include "model/causal_lm.h"
#include "model/family.h"
#include "model_util.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::kF64;

constexpr int64_t kSamplingVocab = 64;

CausalLM tiny_model() {
  CausalLM m(family_for("qwen3_moe", "test").tiny(kSamplingVocab), kF64);
  init_weights(*m, 9);
  return m;
}

GenerationRequest request(std::vector<int64_t> prompt, double temperature, uint64_t seed, int64_t max_new = 10) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.sampling.max_new_tokens = max_new;
  return r;
}

// log_softmax of an unpadded forward of prompt + tokens at the positions that predicted tokens.
std::vector<double> reference_logprobs(CausalLMImpl& m, const std::vector<int64_t>& prompt,
                                       const std::vector<int64_t>& tokens) {
  at::NoGradGuard no_grad;
  std::vector<int64_t> seq = prompt;
  seq.insert(seq.end(), tokens.begin(), tokens.end());
  const int64_t L = int64_t(seq.size());
  at::Tensor hidden = m.forward(at::tensor(seq, at::kLong).view({1, L}), at::arange(L, at::kLong).view({1, L}),
                                at::zeros({1, L}, at::kLong))
                          .hidden;
  at::Tensor logp = at::log_softmax(m.logits(hidden[0]), -1);  // [L,V]
  std::vector<double> out;
  for (int64_t i = 1; i < L; ++i) out.push_back(logp[i - 1][seq[i]].item<double>());
  return out;  // out[i-1]: log p(seq[i] | seq[<i])
}

TEST(GenerateSampling, SameSeedSameTokensWhateverTheBatch) {
  CausalLM m = tiny_model();
  GenerationRequest mine = request({1, 2, 3, 4}, 1.0, 42);
  mine.sampling.top_k = 20;
  mine.sampling.top_p = 0.9;
  auto alone = generate(*m, {mine});
  auto crowded = generate(*m, {request({7, 7, 7, 7, 7, 7, 7}, 1.5, 1, 3), mine, request({9}, 0.8, 2, 12)});
  EXPECT_EQ(alone[0].tokens, crowded[1].tokens);
  ASSERT_EQ(alone[0].logprobs.size(), crowded[1].logprobs.size());
  for (size_t t = 0; t < alone[0].logprobs.size(); ++t) EXPECT_NEAR(alone[0].logprobs[t], crowded[1].logprobs[t], 1e-12);
  // Another seed samples something else (10 tokens at temperature 1 over 64 ids).
  GenerationRequest other = mine;
  other.sampling.seed = 43;
  EXPECT_NE(generate(*m, {other})[0].tokens, alone[0].tokens);
  // And the recompute path samples the same tokens.
  GenerateOptions recompute;
  recompute.recompute = true;
  EXPECT_EQ(generate(*m, {mine}, {}, recompute)[0].tokens, alone[0].tokens);
}

TEST(GenerateSampling, TopKOneAndTinyTopPAreGreedy) {
  CausalLM m = tiny_model();
  auto greedy = generate(*m, {request({3, 1, 4, 1, 5}, 0.0, 0)});
  GenerationRequest k1 = request({3, 1, 4, 1, 5}, 1.3, 5);
  k1.sampling.top_k = 1;
  GenerationRequest p0 = request({3, 1, 4, 1, 5}, 0.9, 6);
  p0.sampling.top_p = 1e-9;
  auto got = generate(*m, {k1, p0});
  EXPECT_EQ(got[0].tokens, greedy[0].tokens);
  EXPECT_EQ(got[1].tokens, greedy[0].tokens);
}

TEST(GenerateSampling, LogprobsAreTheRawDistributionsOfAFullForward) {
  CausalLM m = tiny_model();
  GenerationRequest r = request({5, 6, 7, 8, 9, 10}, 1.7, 3, 12);
  r.sampling.top_k = 5;  // sampling is truncated and heated; the log-probabilities are not
  r.prompt_logprobs = true;
  auto got = generate(*m, {r, request({2, 2}, 0.0, 0, 4)});
  std::vector<double> ref = reference_logprobs(*m, r.prompt, got[0].tokens);
  const size_t P = r.prompt.size();
  ASSERT_EQ(got[0].logprobs.size(), 12u);
  for (size_t t = 0; t < got[0].tokens.size(); ++t) EXPECT_NEAR(got[0].logprobs[t], ref[P - 1 + t], 1e-10) << t;
  ASSERT_EQ(got[0].prompt_logprobs.size(), P);
  EXPECT_TRUE(std::isnan(got[0].prompt_logprobs[0]));
  for (size_t i = 1; i < P; ++i) EXPECT_NEAR(got[0].prompt_logprobs[i], ref[i - 1], 1e-10) << i;
  EXPECT_TRUE(got[1].prompt_logprobs.empty());  // not asked for
}

TEST(GenerateSampling, AStopTokenEndsItsRowAndIsKept) {
  CausalLM m = tiny_model();
  GenerationRequest free = request({1, 2, 3}, 0.0, 0, 8);
  auto unstopped = generate(*m, {free})[0];
  EXPECT_EQ(unstopped.stop, StopReason::kLength);
  ASSERT_EQ(unstopped.tokens.size(), 8u);
  // Stop at the token greedy decoding produces third: the output ends with its first
  // occurrence, included.
  const int64_t stop = unstopped.tokens[2];
  size_t first = 0;
  while (unstopped.tokens[first] != stop) ++first;
  GenerationRequest stopped = free;
  stopped.sampling.stop_token_ids = {stop};
  std::vector<std::pair<size_t, int64_t>> streamed;
  auto got = generate(*m, {stopped, request({4, 4, 4}, 0.0, 0, 8)},
                      [&](size_t n, int64_t token) { streamed.emplace_back(n, token); });
  EXPECT_EQ(got[0].stop, StopReason::kStopToken);
  EXPECT_EQ(got[0].tokens, std::vector<int64_t>(unstopped.tokens.begin(), unstopped.tokens.begin() + first + 1));
  EXPECT_EQ(got[1].tokens.size(), 8u);  // the other row runs on
  // The callback saw every token of both rows, in order per row.
  std::vector<int64_t> seen0, seen1;
  for (auto [n, t] : streamed) (n == 0 ? seen0 : seen1).push_back(t);
  EXPECT_EQ(seen0, got[0].tokens);
  EXPECT_EQ(seen1, got[1].tokens);
  // max_new_tokens 0: nothing, stopped by length.
  auto none = generate(*m, {request({1}, 0.0, 0, 0)});
  EXPECT_TRUE(none[0].tokens.empty());
  EXPECT_EQ(none[0].stop, StopReason::kLength);
}

TEST(GenerateSampling, SamplerFollowsTheTemperatureDistribution) {
  // logits [0, ln 3]: p = 1/4, 3/4 at temperature 1; at temperature 2, (1, sqrt 3) / (1 + sqrt 3).
  std::vector<double> logits = {0.0, std::log(3.0)};
  for (double T : {1.0, 2.0}) {
    SamplingParams p;
    p.temperature = T;
    p.seed = 1;
    TokenSampler s(p);
    int ones = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) ones += s.choose(logits.data(), 2) == 1;
    double expected = T == 1.0 ? 0.75 : std::sqrt(3.0) / (1 + std::sqrt(3.0));
    EXPECT_NEAR(double(ones) / n, expected, 0.015) << "temperature " << T;
  }
  // Greedy picks the first of equal maxima; so do top_k 1 and a tiny top_p.
  std::vector<double> tie = {1.0, 3.0, 3.0, 2.0};
  SamplingParams g;
  EXPECT_EQ(TokenSampler(g).choose(tie.data(), 4), 1);
  g.temperature = 1;
  g.top_k = 1;
  EXPECT_EQ(TokenSampler(g).choose(tie.data(), 4), 1);
  g.top_k = 0;
  g.top_p = 1e-6;
  EXPECT_EQ(TokenSampler(g).choose(tie.data(), 4), 1);
}

TEST(GenerateSampling, BadRequestsNameTheRequestAndField) {
  CausalLM m = tiny_model();
  testing::expect_error_naming([&] { generate(*m, {request({1}, 0, 0), request({}, 0, 0)}); }, "request 1");
  testing::expect_error_naming([&] { generate(*m, {request({1, kSamplingVocab}, 0, 0)}); }, "outside the model's vocabulary");
  GenerationRequest r = request({1}, 0.5, 0);
  r.sampling.top_p = 0;
  testing::expect_error_naming([&] { generate(*m, {r}); }, "top_p");
  r = request({1}, -1, 0);
  testing::expect_error_naming([&] { generate(*m, {r}); }, "temperature");
  r = request({1}, 0, 0);
  r.tenant_slot = 0;
  testing::expect_error_naming([&] { generate(*m, {r}); }, "tenant bank");
}

}  // namespace
}  // namespace glint
