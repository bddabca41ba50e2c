// bf16 mixed precision: bf16 base weights, float32 masters and moments for what trains,
// updates below bf16's resolution kept, the bf16 run learning as the float32 run does,
// and float16 refused with the reason.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "test_util.h"
#include "train/optimizer.h"
#include "train/small_train_options.h"

namespace glint {
namespace {

TEST(AdamWMasters, UpdatesBelowBf16ResolutionAccumulate) {
  // Around 1.0 bf16's neighbours are 1 - 2^-8 and 1 + 2^-7: an update of 1e-3 rounds
  // back to 1.0 every time unless a float32 master keeps it.
  at::Tensor p = at::ones({4}, at::kBFloat16);
  AdamW opt({p}, AdamWOptions{0.9, 0.999, 1e-8, 0.0});
  const double lr = 1e-3;
  for (int s = 0; s < 10; ++s) {
    p.mutable_grad() = at::ones({4}, at::kBFloat16);  // Adam's step is then lr exactly
    opt.step(lr);
  }
  ASSERT_EQ(opt.master(0).scalar_type(), at::kFloat);
  EXPECT_NEAR(opt.master(0)[0].item<double>(), 1.0 - 10 * lr, 1e-6);
  EXPECT_EQ(p.scalar_type(), at::kBFloat16);
  EXPECT_LT(p[0].item<double>(), 1.0) << "ten updates of 1e-3 were lost to bf16 rounding";
  EXPECT_TRUE(at::equal(p, opt.master(0).to(at::kBFloat16)));
  // Moments and masters: 3 float32 copies of 4 elements.
  EXPECT_EQ(opt.state_bytes(), 3 * 4 * 4);
}

TEST(AdamWMasters, Float32ParametersAreTheirOwnMasters) {
  at::Tensor p = at::ones({3});
  AdamW opt({p}, AdamWOptions{});
  p.mutable_grad() = at::ones({3});
  opt.step(1e-3);
  EXPECT_TRUE(opt.master(0).is_same(p));
  EXPECT_EQ(opt.state_bytes(), 2 * 3 * 4);
}

TrainOptions bf16_options(const std::string& name, bool full) {
  TrainOptions o = testing::small_train_options(name);
  o.model.dtype = "bfloat16";
  o.full = full;
  o.data.eval_samples = 0;
  return o;
}

TEST(MixedPrecision, BaseWeightsStayBf16AndWhatTrainsHasFloat32Masters) {
  for (bool full : {false, true}) {
    SCOPED_TRACE(full ? "full" : "lora");
    Trainer t(bf16_options(full ? "bf16_full" : "bf16_lora", full));
    for (const auto& p : t.model().parameters()) EXPECT_EQ(p.scalar_type(), at::kBFloat16);
    // LoRA tensors are float32 themselves; full training's bf16 weights get float32 masters.
    for (const auto& p : t.trainable_parameters())
      EXPECT_EQ(p.scalar_type(), full ? at::kBFloat16 : at::kFloat);
    t.step(t.next_micro_batches());
    for (const auto& p : t.trainable_parameters()) ASSERT_TRUE(p.grad().defined());
  }
}

// The bar: 200 bf16 LoRA steps on the built-in task end within 5% of the float32
// run's final loss (mean of the last 10 steps, the same seed and batches).
TEST(MixedPrecision, Bf16LoraReachesTheFloat32Loss) {
  auto final_loss = [](const std::string& dtype) {
    TrainOptions o = testing::small_train_options("mp_" + dtype);
    o.model.dtype = dtype;
    o.optim.steps = 200;
    o.optim.batch_size = 16;
    o.optim.lr = 3e-3;
    o.data.eval_samples = 0;
    Trainer t(o);
    return testing::first_and_last_loss(t, o.optim.steps);
  };
  auto [f32_first, f32_last] = final_loss("float32");
  auto [bf16_first, bf16_last] = final_loss("bfloat16");
  EXPECT_LT(f32_last, 0.8 * f32_first) << "the float32 run did not learn: nothing to compare with";
  EXPECT_LT(std::abs(bf16_last - f32_last), 0.05 * f32_last) << "bf16 " << bf16_last << " vs float32 " << f32_last;
}

TEST(MixedPrecision, Float16IsRefusedWithTheReason) {
  std::string dir = testing::fresh_temp_dir("fp16");
  testing::RunResult r = testing::run_glint("train --steps 1 --dtype float16", dir);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--dtype float16 is not supported for training"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("loss scaling"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("libtorch"), std::string::npos) << "a stack trace leaked:\n" << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/runs")) << "a refused run made a run directory";
}

}  // namespace
}  // namespace glint
