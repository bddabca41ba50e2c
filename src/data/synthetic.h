// The built-in synthetic task: reverse a short string of digits.
//
// Vocabulary (kVocabSize = 16): ids 0..9 are the digits, then PAD, BOS, SEP, EOS and
// two unused ids. A sample is BOS d1 .. dn SEP dn .. d1 EOS; only the answer (the
// reversed digits and EOS) carries labels. A small random model trained with LoRA
// learns it in a few hundred steps.
#pragma once

#include <cstdint>
#include <vector>

#include "data/sample.h"

namespace glint {

struct ReverseDigitsTask {
  static constexpr int64_t kVocabSize = 16;
  static constexpr int64_t kPad = 10;
  static constexpr int64_t kBos = 11;
  static constexpr int64_t kSep = 12;
  static constexpr int64_t kEos = 13;

  int64_t min_digits = 3;
  int64_t max_digits = 6;

  // Longest sample: BOS + n + SEP + n + EOS.
  int64_t max_sample_len() const { return 2 * max_digits + 3; }

  // `count` samples from a generator seeded with `seed` (the same seed gives the same
  // samples); each has a digit count drawn uniformly from [min_digits, max_digits].
  // Throws glint::Error unless 1 <= min_digits <= max_digits and count >= 0.
  std::vector<Sample> generate(int64_t count, uint64_t seed) const;

  // The prompt (BOS d1..dn SEP) and the expected completion (dn..d1 EOS) of a sample,
  // split at the first label that is not kIgnoreIndex; prompt + answer == input_ids.
  static std::vector<int64_t> prompt_of(const Sample& s);
  static std::vector<int64_t> answer_of(const Sample& s);
};

}  // namespace glint
