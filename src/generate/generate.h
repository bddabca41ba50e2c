// Text generation: a batch of requests decoded together with a KV cache
// (model/decode_cache.h). One prefill forward of every prompt, then one forward of one
// token per request still running, until each one stops.
//
// Contracts:
//   - Every request's tokens depend only on its prompt, its SamplingParams (seed included)
//     and its adapter, never on the other requests of the batch (up to the last bits of
//     the model's arithmetic, which batching may round differently in float32).
//   - A log-probability is that of the model's raw next-token distribution,
//     log_softmax(logits) at temperature 1, before top-k / top-p.
//   - A stop token ends its request and is the last of its tokens (stop = kStopToken);
//     otherwise the request ends after max_new_tokens tokens (stop = kLength).
//   - Generation runs without gradients and never changes the model.
//
// Legend: B requests, S positions, V vocabulary.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "generate/sampling.h"

namespace glint {

class CausalLMImpl;
class TenantBank;

struct GenerationRequest {
  std::vector<int64_t> prompt;  // token ids, at least one, each < the model's vocab_size
  SamplingParams sampling;
  // The TenantBank slot whose adapter serves this request (-1: the model as it is, with
  // whatever single adapter is attached). Needs GenerateOptions::tenants.
  int64_t tenant_slot = -1;
  bool prompt_logprobs = false;  // also return the log-probability of each prompt token
};

enum class StopReason { kStopToken, kLength };
const char* stop_reason_name(StopReason r);  // "stop", "length"

struct GenerationResult {
  std::vector<int64_t> tokens;    // the new tokens
  std::vector<double> logprobs;   // per new token, under the raw distribution
  StopReason stop = StopReason::kLength;
  // With prompt_logprobs: per prompt token i, log p(prompt[i] | prompt[<i]); [0] is NaN.
  std::vector<double> prompt_logprobs;
  at::Tensor logits;  // with GenerateOptions::keep_logits: [tokens, V] float64 on CPU
};

struct GenerateOptions {
  // The reference path: no cache, each step runs every running request's whole sequence
  // again (the same results, O(length) forwards instead of O(1)).
  bool recompute = false;
  TenantBank* tenants = nullptr;  // the bank whose slots requests name (set_rows is called)
  bool keep_logits = false;       // fill GenerationResult::logits (tests)
  // Called with each step's chosen tokens (one per running request, -1 for none) before
  // they are used; it may replace them. Ranks that generate together make one rank's
  // choices everyone's (a last-bit difference in logits could otherwise pick another
  // token on one rank, and the ranks' forwards would diverge).
  std::function<void(std::vector<int64_t>&)> agree;
};

// Called with each new token as soon as it is chosen: (request index, token).
using TokenCallback = std::function<void(size_t request, int64_t token)>;

// Generates for every request, as one batch. Throws glint::Error naming the request (and
// the field or position) for an empty prompt, a token id outside [0, vocab_size), bad
// sampling parameters, or a tenant slot without a bank.
std::vector<GenerationResult> generate(CausalLMImpl& model, const std::vector<GenerationRequest>& requests,
                                       const TokenCallback& on_token = {}, const GenerateOptions& options = {});

// Greedy decoding by full recomputation (every step a forward of the whole right-padded
// sequences): up to max_new tokens per prompt, a row ending after it produces `eos`.
// Kept as the plainest reference for the cached engine.
std::vector<std::vector<int64_t>> greedy_generate_recompute(CausalLMImpl& model,
                                                            const std::vector<std::vector<int64_t>>& prompts,
                                                            int64_t max_new, int64_t eos, int64_t pad);

}  // namespace glint
