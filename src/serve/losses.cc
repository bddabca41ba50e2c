#include "serve/losses.h"

#include <ATen/ATen.h>

#include <cmath>

#include "core/error.h"

namespace glint {

namespace {

// Each loss's config keys and their defaults.
const std::map<std::string, std::map<std::string, double>>& loss_defaults() {
  static const std::map<std::string, std::map<std::string, double>> d = {
      {"cross_entropy", {}},
      {"importance_sampling", {}},
      {"ppo", {{"clip_low_threshold", 0.8}, {"clip_high_threshold", 1.2}}},
      {"cispo", {{"clip_low_threshold", 0.0}, {"clip_high_threshold", 4.0}}},
      {"dro", {{"beta", NAN}}},  // no default: required
  };
  return d;
}

}  // namespace

TinkerLoss TinkerLoss::parse(const std::string& name, const std::map<std::string, double>& config) {
  auto it = loss_defaults().find(name);
  if (it == loss_defaults().end())
    fail("loss_fn: unknown loss '", name, "' (cross_entropy, importance_sampling, ppo, cispo, dro)");
  TinkerLoss loss{name, it->second};
  for (const auto& [key, value] : config) {
    GLINT_CHECK(it->second.count(key), "loss_fn_config: '", key, "' is not a parameter of ", name,
                it->second.empty() ? " (it takes none)" : "");
    GLINT_CHECK(std::isfinite(value), "loss_fn_config: ", key, " must be a finite number");
    loss.config[key] = value;
  }
  for (const auto& [key, value] : loss.config)
    GLINT_CHECK(!std::isnan(value), "loss_fn_config: ", name, " needs '", key, "'");
  if (loss.config.count("clip_low_threshold"))
    GLINT_CHECK(loss.config.at("clip_low_threshold") <= loss.config.at("clip_high_threshold"),
                "loss_fn_config: clip_low_threshold (", loss.config.at("clip_low_threshold"),
                ") is above clip_high_threshold (", loss.config.at("clip_high_threshold"), ")");
  return loss;
}

std::vector<std::string> TinkerLoss::float_inputs() const {
  if (name == "cross_entropy") return {"weights"};
  return {"logprobs", "advantages"};
}

at::Tensor TinkerLoss::operator()(const at::Tensor& lp, const std::map<std::string, at::Tensor>& in) const {
  if (name == "cross_entropy") return -(lp * in.at("weights")).sum();
  const at::Tensor& q = in.at("logprobs");
  const at::Tensor& A = in.at("advantages");
  if (name == "dro") {
    const double beta = config.at("beta");
    return -(lp * A - (beta / 2.0) * (lp - q).pow(2)).sum();
  }
  at::Tensor ratio = at::exp(lp - q);
  if (name == "importance_sampling") return -(ratio * A).sum();
  const double lo = config.at("clip_low_threshold"), hi = config.at("clip_high_threshold");
  if (name == "ppo") return -at::min(ratio * A, at::clamp(ratio, lo, hi) * A).sum();
  GLINT_ASSERT(name == "cispo", "unknown loss ", name);
  return -(at::clamp(ratio, lo, hi).detach() * lp * A).sum();
}

}  // namespace glint
