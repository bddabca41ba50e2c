// Activation checkpointing changes memory, not numbers: every loss and gradient equals
// the run without it (float64), for LoRA and full training, with the router loss on.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "data/synthetic.h"
#include "model/config.h"
#include "parallel/fsdp.h"
#include "train/trainer.h"

#include "test_util.h"

namespace glint {
namespace {

TrainOptions options(bool full, bool checkpointing) {
  TrainOptions o;
  o.run.output = glint::testing::fresh_temp_dir("ckpt");
  o.optim.steps = 2;
  o.optim.batch_size = 4;
  o.memory.micro_batch_size = 2;
  o.model.dtype = "float64";
  o.model.threads = 1;
  o.full = full;
  o.parallel.recompute = checkpointing;
  ModelConfig c = tiny_moe_config(ReverseDigitsTask::kVocabSize);
  c.num_hidden_layers = 3;
  c.mlp_only_layers = {1};
  c.output_router_logits = true;
  o.model.config = c;
  return o;
}

class Checkpointing : public ::testing::TestWithParam<bool> {};

TEST_P(Checkpointing, SameLossesGradientsAndUpdates) {
  Trainer plain(options(GetParam(), false)), ckpt(options(GetParam(), true));
  ASSERT_FALSE(plain.model().layer_runner);
  ASSERT_TRUE(ckpt.model().layer_runner);
  for (int s = 0; s < 2; ++s) {
    auto b1 = plain.next_micro_batches(), b2 = ckpt.next_micro_batches();
    StepStats a = plain.step(b1), b = ckpt.step(b2);
    EXPECT_NEAR(a.loss, b.loss, 1e-12);
    EXPECT_NEAR(a.aux_loss, b.aux_loss, 1e-12);
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-10);
    auto pa = plain.trainable_parameters(), pb = ckpt.trainable_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      ASSERT_TRUE(pa[i].grad().defined() && pb[i].grad().defined()) << i;
      EXPECT_TRUE(at::allclose(pa[i].grad(), pb[i].grad(), 1e-9, 1e-12)) << "grad " << i;
      EXPECT_TRUE(at::allclose(pa[i], pb[i], 1e-9, 1e-12)) << "param " << i;
    }
  }
}

// FSDP's overlap changes timing, not numbers; with it on, every layer after the first
// in each direction was gathered ahead (3 layers, 2 micro-batches: 2 forward and 2
// backward each), with it off none was.
TEST(FsdpOverlap, PrefetchesEachNextLayerAndKeepsTheNumbers) {
  TrainOptions on = options(true, false), off = options(true, false);
  on.parallel.fsdp = off.parallel.fsdp = true;
  on.parallel.fsdp_overlap = "on";
  off.parallel.fsdp_overlap = "off";
  Trainer a(on), b(off);
  auto runner = [](Trainer& t) { return std::dynamic_pointer_cast<FsdpRunner>(t.model().layer_runner); };
  ASSERT_TRUE(runner(a) && runner(b));
  StepStats sa = a.step(a.next_micro_batches()), sb = b.step(b.next_micro_batches());
  EXPECT_EQ(runner(a)->prefetched_gathers(), 8);
  EXPECT_EQ(runner(b)->prefetched_gathers(), 0);
  EXPECT_NEAR(sa.loss, sb.loss, 1e-12);
  EXPECT_NEAR(sa.grad_norm, sb.grad_norm, 1e-10);
  auto pa = a.trainable_parameters(), pb = b.trainable_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(at::allclose(pa[i], pb[i], 1e-9, 1e-12)) << "param " << i;
}

INSTANTIATE_TEST_SUITE_P(LoraAndFull, Checkpointing, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Full" : "Lora"; });

}  // namespace
}  // namespace glint
