#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "data/synthetic.h"
#include "lora/peft_io.h"
#include "model/config.h"
#include "train/trainer.h"

#include "test_util.h"
#include "train/small_train_options.h"

namespace glint {
namespace {


// Gradient accumulation must equal one large batch: the loss is normalized by the label
// tokens of the whole step, not per micro-batch.
void expect_accumulation_matches(bool full) {
  TrainOptions big = testing::small_train_options("accum_big"), split = testing::small_train_options("accum_split");
  big.full = split.full = full;
  split.memory.micro_batch_size = 2;
  Trainer a(big), b(split);
  for (int s = 0; s < 3; ++s) {
    auto ba = a.next_micro_batches(), bb = b.next_micro_batches();
    ASSERT_EQ(ba.size(), 1u);
    ASSERT_EQ(bb.size(), 4u);
    StepStats sa = a.step(ba), sb = b.step(bb);
    EXPECT_NEAR(sa.loss, sb.loss, 1e-12 * std::max(1.0, sa.loss)) << "step " << s;
    EXPECT_NEAR(sa.grad_norm, sb.grad_norm, 1e-10) << "step " << s;
    EXPECT_EQ(sa.label_tokens, sb.label_tokens);
  }
  auto pa = a.trainable_parameters(), pb = b.trainable_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(at::allclose(pa[i], pb[i], 1e-9, 1e-12)) << "parameter " << i;
}

TEST(Trainer, GradientAccumulationEqualsOneBatchLora) { expect_accumulation_matches(false); }
TEST(Trainer, GradientAccumulationEqualsOneBatchFull) { expect_accumulation_matches(true); }

TEST(Trainer, RouterAuxLossIsReportedAndTrained) {
  TrainOptions o = testing::small_train_options("aux");
  ModelConfig c = tiny_moe_config(ReverseDigitsTask::kVocabSize);
  c.output_router_logits = true;
  c.router_aux_loss_coef = 0.01;
  o.model.config = c;
  Trainer t(o);
  StepStats st = t.step(t.next_micro_batches());
  // Perfectly balanced routing gives exactly top_k (= 2); a random router is close to it.
  EXPECT_GT(st.aux_loss, 1.5);
  EXPECT_LT(st.aux_loss, 3.0);
}

TEST(Trainer, LoraLearnsTheBuiltInTask) {
  TrainOptions o = testing::small_train_options("learn");
  o.model.dtype = "float32";
  o.optim.batch_size = 32;
  o.optim.lr = 3e-3;
  o.optim.steps = 150;
  Trainer t(o);
  auto [first, last] = testing::first_and_last_loss(t, o.optim.steps);
  EXPECT_LT(last, 0.8 * first) << "first " << first << " last " << last;
}

TEST(Trainer, SavedAdapterReloadsToTheSameLogits) {
  TrainOptions o = testing::small_train_options("reload");
  o.optim.steps = 2;
  Trainer t(o);
  t.run();
  std::string dir = o.run.output + "/adapter";
  ASSERT_TRUE(std::filesystem::exists(dir + "/adapter_model.safetensors"));
  // A fresh base (same seed, so same weights) plus the loaded adapter.
  TrainOptions base = o;
  base.run.output = o.run.output + "_base";
  Trainer fresh(base);
  fresh.lora().detach_from(fresh.model());
  LoraModel loaded = load_adapter(dir, fresh.model());
  at::Tensor ids = at::randint(0, ReverseDigitsTask::kVocabSize, {2, 10}, at::kLong);
  at::Tensor pos = at::arange(10, at::kLong).repeat({2, 1}), seg = at::zeros({2, 10}, at::kLong);
  at::NoGradGuard ng;
  at::Tensor want = t.model().logits(t.model().forward(ids, pos, seg).hidden);
  at::Tensor got = fresh.model().logits(fresh.model().forward(ids, pos, seg).hidden);
  EXPECT_TRUE(at::equal(want, got)) << "largest difference " << (want - got).abs().max().item<double>();
}

}  // namespace
}  // namespace glint
