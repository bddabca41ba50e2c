#include "generate/sampling.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace glint {

void SamplingParams::validate(const std::string& where) const {
  GLINT_CHECK(max_new_tokens >= 0, where, ": max_new_tokens must be >= 0, got ", max_new_tokens);
  GLINT_CHECK(std::isfinite(temperature) && temperature >= 0, where, ": temperature must be >= 0 (0: greedy), got ",
              temperature);
  GLINT_CHECK(top_k >= 0, where, ": top_k must be >= 0 (0: off), got ", top_k);
  GLINT_CHECK(top_p > 0 && top_p <= 1, where, ": top_p must be in (0, 1] (1: off), got ", top_p);
  for (int64_t id : stop_token_ids) GLINT_CHECK(id >= 0, where, ": stop token id ", id, " is negative");
  for (const auto& seq : stop_sequences) {
    GLINT_CHECK(!seq.empty(), where, ": an empty stop sequence");
    for (int64_t id : seq) GLINT_CHECK(id >= 0, where, ": stop sequence token id ", id, " is negative");
  }
}

TokenSampler::TokenSampler(const SamplingParams& params)
    : params_(params), generator_(at::detail::createCPUGenerator(params.seed)) {}

bool TokenSampler::is_stop(const std::vector<int64_t>& generated) const {
  if (generated.empty()) return false;
  if (is_stop(generated.back())) return true;
  for (const auto& seq : params_.stop_sequences)
    if (seq.size() <= generated.size() && std::equal(seq.rbegin(), seq.rend(), generated.rbegin())) return true;
  return false;
}

bool TokenSampler::is_stop(int64_t token) const {
  return std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(), token) !=
         params_.stop_token_ids.end();
}

int64_t TokenSampler::choose(const double* logits, int64_t vocab) {
  GLINT_ASSERT(vocab > 0, "choose over an empty vocabulary");
  if (params_.greedy()) return std::max_element(logits, logits + vocab) - logits;  // first of the maxima
  auto before = [&](int64_t a, int64_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), int64_t(0));
  int64_t n = vocab;
  if (params_.top_k > 0 && params_.top_k < vocab) {
    n = params_.top_k;
    std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), before);
  } else if (params_.top_p < 1) {
    std::sort(order_.begin(), order_.end(), before);
  }
  // Weights relative to the best candidate: exp((l - max) / T).
  const double best = logits[*std::min_element(order_.begin(), order_.begin() + n, before)];
  weights_.resize(n);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += weights_[i] = std::exp((logits[order_[i]] - best) / params_.temperature);
  if (params_.top_p < 1) {  // order_[0, n) is sorted: keep the fewest whose mass reaches top_p
    double mass = 0;
    int64_t keep = 0;
    while (keep < n && (keep == 0 || mass < params_.top_p * total)) mass += weights_[keep++];
    n = keep;
    total = mass;
  }
  // uniform_ takes the generator's lock itself.
  at::Tensor u = at::empty({1}, at::kDouble).uniform_(0.0, 1.0, generator_);
  const double target = u.item<double>() * total;
  double seen = 0;
  for (int64_t i = 0; i < n; ++i) {
    seen += weights_[i];
    if (target < seen) return order_[i];
  }
  return order_[n - 1];  // rounding at the very end of the mass
}

}  // namespace glint
