// The Tinker losses against values computed by hand (a plain loop over tokens from the
// documented formulas) and their gradients against central finite differences.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/error.h"
#include "serve/losses.h"
#include "test_util.h"

namespace {

using glint::TinkerLoss;

const std::vector<double> kLp = {-0.3, -2.0, -0.05, -1.2, -0.7};
const std::vector<double> kQ = {-0.5, -1.0, -0.06, -1.9, -0.7};
const std::vector<double> kA = {1.5, -0.5, 2.0, 0.8, -1.1};
const std::vector<double> kW = {0.0, 1.0, 0.25, 2.0, -0.5};  // real-valued weights

at::Tensor t(const std::vector<double>& v) { return at::tensor(v, at::kDouble); }

double run(const TinkerLoss& loss, const std::vector<double>& lp) {
  return loss(t(lp), {{"weights", t(kW)}, {"logprobs", t(kQ)}, {"advantages", t(kA)}}).item<double>();
}

// The loss by hand, token by token.
double by_hand(const std::string& name, const std::map<std::string, double>& cfg, const std::vector<double>& lp) {
  double sum = 0;
  for (size_t i = 0; i < lp.size(); ++i) {
    const double r = std::exp(lp[i] - kQ[i]);
    if (name == "cross_entropy") {
      sum += -lp[i] * kW[i];
    } else if (name == "importance_sampling") {
      sum += -r * kA[i];
    } else if (name == "ppo") {
      const double c = std::min(std::max(r, cfg.at("clip_low_threshold")), cfg.at("clip_high_threshold"));
      sum += -std::min(r * kA[i], c * kA[i]);
    } else if (name == "cispo") {
      const double c = std::min(std::max(r, cfg.at("clip_low_threshold")), cfg.at("clip_high_threshold"));
      sum += -c * lp[i] * kA[i];
    } else if (name == "dro") {
      const double d = lp[i] - kQ[i];
      sum += -(lp[i] * kA[i] - cfg.at("beta") / 2 * d * d);
    }
  }
  return sum;
}

struct Case {
  std::string name;
  std::map<std::string, double> config;  // as sent
  std::map<std::string, double> used;    // with the defaults
};

class Losses : public ::testing::TestWithParam<Case> {};

TEST_P(Losses, ValueByHandAndGradientByFiniteDifferences) {
  const Case c = GetParam();
  TinkerLoss loss = TinkerLoss::parse(c.name, c.config);
  EXPECT_EQ(loss.config, c.used);
  EXPECT_NEAR(run(loss, kLp), by_hand(c.name, c.used, kLp), 1e-12);
  at::Tensor lp = t(kLp).requires_grad_(true);
  loss(lp, {{"weights", t(kW)}, {"logprobs", t(kQ)}, {"advantages", t(kA)}}).backward();
  for (size_t i = 0; i < kLp.size(); ++i) {
    if (c.name == "cispo" || c.name == "ppo") {
      // Away from the clip edges the loss is smooth in lp: a central difference holds.
      const double r = std::exp(kLp[i] - kQ[i]);
      if (std::abs(r - c.used.at("clip_low_threshold")) < 1e-3 || std::abs(r - c.used.at("clip_high_threshold")) < 1e-3)
        continue;
    }
    const double h = 1e-6;
    std::vector<double> up = kLp, down = kLp;
    up[i] += h;
    down[i] -= h;
    double fd = (run(loss, up) - run(loss, down)) / (2 * h);
    if (c.name == "cispo") {
      // cispo stops the gradient through the clipped ratio: d/dlp = -clamp(r) * A.
      const double r = std::exp(kLp[i] - kQ[i]);
      fd = -std::min(std::max(r, c.used.at("clip_low_threshold")), c.used.at("clip_high_threshold")) * kA[i];
    }
    EXPECT_NEAR(lp.grad()[i].item<double>(), fd, 1e-6) << c.name << " token " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tinker, Losses,
    ::testing::Values(Case{"cross_entropy", {}, {}}, Case{"importance_sampling", {}, {}},
                      Case{"ppo", {}, {{"clip_low_threshold", 0.8}, {"clip_high_threshold", 1.2}}},
                      Case{"ppo", {{"clip_low_threshold", 0.9}}, {{"clip_low_threshold", 0.9}, {"clip_high_threshold", 1.2}}},
                      Case{"cispo", {}, {{"clip_low_threshold", 0.0}, {"clip_high_threshold", 4.0}}},
                      Case{"cispo", {{"clip_high_threshold", 1.1}}, {{"clip_low_threshold", 0.0}, {"clip_high_threshold", 1.1}}},
                      Case{"dro", {{"beta", 0.3}}, {{"beta", 0.3}}}),
    [](const auto& info) { return info.param.name + "_" + std::to_string(info.index); });

TEST(Losses, CrossEntropyIsASumNotAMean) {
  // Two tokens of weight 1 give twice one token's loss.
  TinkerLoss ce = TinkerLoss::parse("cross_entropy", {});
  at::Tensor lp = t({-1.0, -1.0});
  EXPECT_DOUBLE_EQ(ce(lp, {{"weights", t({1.0, 1.0})}}).item<double>(), 2.0);
}

TEST(Losses, BadNamesAndConfigsAreNamed) {
  using glint::testing::expect_error_naming;
  expect_error_naming([] { TinkerLoss::parse("dpo", {}); }, "dpo");
  expect_error_naming([] { TinkerLoss::parse("ppo", {{"clip", 0.2}}); }, "clip");
  expect_error_naming([] { TinkerLoss::parse("cross_entropy", {{"beta", 1}}); }, "beta");
  expect_error_naming([] { TinkerLoss::parse("dro", {}); }, "beta");
  expect_error_naming([] { TinkerLoss::parse("ppo", {{"clip_low_threshold", 1.5}}); }, "clip_low_threshold");
  expect_error_naming([] { TinkerLoss::parse("ppo", {{"clip_high_threshold", NAN}}); }, "clip_high_threshold");
}

}  // namespace
