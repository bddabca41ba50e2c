#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/world.h"
#include "model/causal_lm.h"
#include "model/config.h"
#include "train/optimizer.h"
#include "train/step_engine.h"

namespace glint {
namespace {

// Scalar AdamW written from the paper's update rule (Loshchilov & Hutter), one element.
struct NaiveAdamW {
  double m = 0, v = 0;
  int t = 0;
  double step(double p, double g, double lr, double b1, double b2, double eps, double wd) {
    ++t;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    double mh = m / (1 - std::pow(b1, t)), vh = v / (1 - std::pow(b2, t));
    p = p - lr * wd * p;
    return p - lr * mh / (std::sqrt(vh) + eps);
  }
};

TEST(OptimizerAdamW, MatchesScalarReferenceOverSteps) {
  at::manual_seed(3);
  at::Tensor p = at::randn({5}, at::kDouble);
  at::Tensor ref = p.clone();
  AdamWOptions o{0.9, 0.95, 1e-8, 0.1};
  AdamW opt({p}, o);
  std::vector<NaiveAdamW> naive(5);
  for (int s = 0; s < 4; ++s) {
    at::Tensor g = at::randn({5}, at::kDouble);
    p.mutable_grad() = g.clone();
    double lr = 0.01 * (s + 1);
    opt.step(lr);
    for (int i = 0; i < 5; ++i)
      ref[i] = naive[i].step(ref[i].item<double>(), g[i].item<double>(), lr, 0.9, 0.95, 1e-8, 0.1);
  }
  // Moments are kept in float32, so agreement is to float32 precision.
  EXPECT_TRUE(at::allclose(p, ref, 1e-6, 1e-7)) << p << ref;
}

TEST(OptimizerAdamW, SkipsParametersWithoutGradient) {
  at::Tensor a = at::ones({2}), b = at::ones({2});
  AdamW opt({a, b}, {});
  a.mutable_grad() = at::ones({2});
  opt.step(0.1);
  EXPECT_TRUE(at::equal(b, at::ones({2})));
  EXPECT_FALSE(at::equal(a, at::ones({2})));
}

TEST(OptimizerAdamW, RejectsBadHyperparameters) {
  EXPECT_THROW(AdamW({at::ones({1})}, AdamWOptions{1.5, 0.9, 1e-8, 0}), Error);
  EXPECT_THROW(AdamW({at::ones({1})}, AdamWOptions{0.9, 0.9, 0, 0}), Error);
}

// The step engine's clipping (the one the trainer uses): the global norm of a learner's
// gradients, each tensor's squares divided by the ranks holding a copy of it.
TEST(StepEngineClip, NormAndScaling) {
  CausalLM model(tiny_moe_config(16), TensorPlacement{at::kFloat, c10::Device(c10::kCPU)});
  StepEngine engine(*model, StepParallel{Comm::create(World{})}, nullptr);
  at::Tensor a = at::zeros({2}), b = at::zeros({1});
  AdamWOptions adam;
  Learner& l = engine.add("t", 0, {{"a", a}, {"b", b}}, {false, false}, &adam);
  a.mutable_grad() = at::tensor({3.0f, 0.0f});
  b.mutable_grad() = at::tensor({4.0f});
  EXPECT_NEAR(engine.clip(l, 1.0), 5.0, 1e-9);
  EXPECT_NEAR(a.grad()[0].item<double>(), 3.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_NEAR(b.grad()[0].item<double>(), 4.0 / (5.0 + 1e-6), 1e-6);
  // Below the threshold nothing changes.
  EXPECT_NEAR(engine.clip(l, 10.0), 1.0, 1e-5);
  EXPECT_NEAR(b.grad()[0].item<double>(), 4.0 / (5.0 + 1e-6), 1e-6);
  // A tensor two ranks hold counts once over the world: half its squares on each.
  a.mutable_grad() = at::tensor({3.0f, 0.0f});
  b.mutable_grad() = at::tensor({4.0f});
  l.placement[1].copies = 2;
  EXPECT_NEAR(engine.clip(l, 0.0), std::sqrt(9.0 + 16.0 / 2), 1e-6);
  EXPECT_EQ(b.grad()[0].item<float>(), 4.0f);  // max_norm 0: no clipping
}

TEST(OptimizerSchedule, WarmupThenCosine) {
  LrSchedule s{1.0, 10, 110, 0.1};
  EXPECT_DOUBLE_EQ(s.at(1), 0.1);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_DOUBLE_EQ(s.at(11), 1.0);  // first step after warmup at the peak
  EXPECT_NEAR(s.at(61), 0.1 + 0.9 * 0.5, 1e-12);  // halfway through the cosine
  EXPECT_NEAR(s.at(110), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.99)), 1e-12);
  EXPECT_GT(s.at(110), 0.1);
  LrSchedule flat{2.0, 0, 1, 0.0};
  EXPECT_DOUBLE_EQ(flat.at(1), 2.0);
}

}  // namespace
}  // namespace glint
