#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/world.h"
#include "live_bytes.h"
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

// A tensor of several update blocks (and a part block) gets what the update formula gives
// over the whole tensor at once, element for element, in float32 with a float32 gradient
// and with a bf16 parameter (float32 master, bf16 gradient); a non-contiguous gradient too.
TEST(OptimizerAdamW, BlocksOfALargeTensorGiveTheWholeTensorsUpdate) {
  const int64_t n = 2 * kAdamWBlockElements + 12345;
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    at::manual_seed(4);
    at::Tensor p = at::randn({n / 5, 5}, at::kFloat).to(dtype);
    at::Tensor w = p.to(at::kFloat), m = at::zeros({n / 5, 5}), v = at::zeros({n / 5, 5});
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    AdamW opt({p}, AdamWOptions{b1, b2, eps, wd});
    for (int s = 1; s <= 3; ++s) {
      at::Tensor g = at::randn({5, n / 5}, at::kFloat).t().to(dtype);  // non-contiguous at step 3 only
      if (s < 3) g = g.contiguous();
      p.mutable_grad() = g;
      const double lr = 0.01 * s;
      opt.step(lr);
      at::Tensor gf = g.to(at::kFloat);
      m.mul_(b1).add_(gf, 1 - b1);
      v.mul_(b2).addcmul_(gf, gf, 1 - b2);
      at::Tensor denom = (v / (1 - std::pow(b2, s))).sqrt_().add_(eps);
      w.mul_(1 - lr * wd).add_((m / (1 - std::pow(b1, s))).div_(denom), -lr);
      EXPECT_TRUE(at::equal(opt.master(0), w)) << "step " << s << " dtype " << dtype;
      EXPECT_TRUE(at::equal(opt.exp_avg_sq()[0], v)) << "step " << s;
    }
    EXPECT_TRUE(at::equal(p, w.to(dtype)));
  }
}

// The update's temporaries are a few blocks, not two copies of the tensor.
TEST(OptimizerAdamW, UpdateOfALargeTensorAllocatesAFewBlocks) {
  const int64_t n = 8 * kAdamWBlockElements;
  at::Tensor p = at::randn({n});
  AdamW opt({p}, AdamWOptions{});
  p.mutable_grad() = at::randn({n});
  int64_t peak = 0;
  {
    testing::LiveBytes live;
    opt.step(0.01);
    peak = live.peak();
  }
  const int64_t block_bytes = kAdamWBlockElements * 4;
  EXPECT_LE(peak, 3 * block_bytes) << "the update held " << peak << " bytes at once for a tensor of " << n * 4;
  EXPECT_GE(peak, block_bytes);  // it did make its temporaries, a block at a time
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
