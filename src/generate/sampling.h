// Choosing the next token from a row of logits: greedy, or sampled at a temperature
// from the top-k / top-p (nucleus) candidates, each request with its own random stream.
//
// Legend: V vocabulary.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <string>
#include <vector>

namespace glint {

struct SamplingParams {
  int64_t max_new_tokens = 256;  // tokens to generate at most (0: none)
  double temperature = 0.0;      // 0: greedy (the most likely token, the lowest id on ties)
  int64_t top_k = 0;             // sample among the k most likely tokens (0: all)
  double top_p = 1.0;            // then among the fewest most likely whose mass reaches p (1: all)
  uint64_t seed = 0;             // the request's random stream
  std::vector<int64_t> stop_token_ids;  // a generated one ends the request (and is kept)
  // Generated tokens ending with one of these ends the request (the sequence is kept).
  std::vector<std::vector<int64_t>> stop_sequences;
  // Throws glint::Error naming `where` and the bad field and value.
  void validate(const std::string& where) const;
  bool greedy() const { return temperature == 0.0; }
};

// One request's token chooser: its parameters and its own generator, seeded once, so the
// tokens it picks depend only on the logits it is given, never on other requests.
class TokenSampler {
 public:
  explicit TokenSampler(const SamplingParams& params);
  // The next token for logits [V] (float64, contiguous, on CPU). Candidates are ordered
  // by logit, then by id (lower first), so top_k = 1 and a tiny top_p both give greedy's
  // token. Sampling draws exactly one uniform number from the stream per token.
  int64_t choose(const double* logits, int64_t vocab);
  bool is_stop(int64_t token) const;
  // Whether the generated tokens so far end the request (a stop token or sequence last).
  bool is_stop(const std::vector<int64_t>& generated) const;

 private:
  SamplingParams params_;
  at::Generator generator_;
  std::vector<int64_t> order_;  // scratch: candidate ids
  std::vector<double> weights_;  // scratch
};

}  // namespace glint
