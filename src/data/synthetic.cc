#include "data/synthetic.h"

#include <random>

#include "core/error.h"

namespace glint {

std::vector<Sample> ReverseDigitsTask::generate(int64_t count, uint64_t seed) const {
  GLINT_CHECK(min_digits >= 1 && max_digits >= min_digits,
              "reverse-digits task: need 1 <= min_digits <= max_digits, got min_digits ",
              min_digits, ", max_digits ", max_digits);
  GLINT_CHECK(count >= 0, "reverse-digits task: sample count must be >= 0, got ", count);
  // std::uniform_int_distribution is deterministic for one standard library (libstdc++
  // here), which is what reproducible runs need; the draw order is: length, then digits.
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> len_dist(min_digits, max_digits), digit(0, 9);
  std::vector<Sample> out;
  out.reserve(size_t(count));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = len_dist(rng);
    std::vector<int64_t> digits(static_cast<size_t>(n));
    for (auto& d : digits) d = digit(rng);
    Sample s;
    s.input_ids.reserve(size_t(2 * n + 3));
    s.labels.reserve(size_t(2 * n + 3));
    // Prompt: BOS d1 .. dn SEP, not trained.
    s.input_ids.push_back(kBos);
    s.input_ids.insert(s.input_ids.end(), digits.begin(), digits.end());
    s.input_ids.push_back(kSep);
    s.labels.assign(s.input_ids.size(), kIgnoreIndex);
    // Answer: dn .. d1 EOS, labels = ids (HF-aligned: the first trained prediction is
    // made at SEP's position).
    for (int64_t j = n - 1; j >= 0; --j) {
      s.input_ids.push_back(digits[j]);
      s.labels.push_back(digits[j]);
    }
    s.input_ids.push_back(kEos);
    s.labels.push_back(kEos);
    out.push_back(std::move(s));
  }
  return out;
}

namespace {
// Index of the first trained label: the start of the answer (size() when none is).
size_t answer_start(const Sample& s) {
  for (size_t i = 0; i < s.labels.size(); ++i)
    if (s.labels[i] != kIgnoreIndex) return i;
  return s.labels.size();
}
}  // namespace

std::vector<int64_t> ReverseDigitsTask::prompt_of(const Sample& s) {
  GLINT_ASSERT(s.labels.size() == s.input_ids.size());
  return {s.input_ids.begin(), s.input_ids.begin() + answer_start(s)};
}

std::vector<int64_t> ReverseDigitsTask::answer_of(const Sample& s) {
  GLINT_ASSERT(s.labels.size() == s.input_ids.size());
  return {s.input_ids.begin() + answer_start(s), s.input_ids.end()};
}

}  // namespace glint
