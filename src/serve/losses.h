// The Tinker API's built-in losses over one datum: per-token log-probabilities of its
// targets under the model being trained (lp), summed over tokens, never averaged.
//
//   cross_entropy        -(lp * weights).sum()                (weights real-valued)
//   importance_sampling  -(exp(lp - q) * A).sum()
//   ppo                  -min(r * A, clamp(r, lo, hi) * A).sum(), r = exp(lp - q)
//                        (clip_low_threshold 0.8, clip_high_threshold 1.2)
//   cispo                -(detach(clamp(r, lo, hi)) * lp * A).sum()   (lo 0, hi 4)
//   dro                  -(lp * A - beta / 2 * (lp - q)^2).sum()      (beta: required)
//
// q: the datum's "logprobs" (the sampler's log-probabilities), A: its "advantages".
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

namespace glint {

struct TinkerLoss {
  std::string name;                  // one of the five above
  std::map<std::string, double> config;  // loss_fn_config, defaults filled in

  // Checks the name and the config's keys and values; fills the defaults. Throws
  // glint::Error naming the bad name, key or value.
  static TinkerLoss parse(const std::string& name, const std::map<std::string, double>& config);
  // The loss_fn_inputs this loss needs besides target_tokens.
  std::vector<std::string> float_inputs() const;
  // The datum's loss from lp [N] and its float inputs (each [N], lp's dtype and device).
  at::Tensor operator()(const at::Tensor& lp, const std::map<std::string, at::Tensor>& inputs) const;
};

}  // namespace glint
