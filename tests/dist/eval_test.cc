// Validation loss (--eval-data) and continuing from an adapter (--init-adapter), through
// the binary: the logged eval_loss equals a naive per-sample computation on the saved
// adapter, on 1 rank and on 2 ranks with EP x FSDP, with a partial last batch and with
// --eval-batches; an adapter trained further starts exactly where it stood.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include "data/tokenized_jsonl.h"
#include "lora/peft_io.h"
#include "model/weights.h"
#include "test_util.h"
#include "tiny_run.h"

namespace {

using glint::testing::launch;
using glint::testing::make_data;
using glint::testing::make_model;
using glint::testing::read_jsonl;
using glint::testing::rel;
using glint::testing::RunResult;


// Mean next-token cross-entropy of the first `count` samples of `data`, one sample at a
// time, with the adapter in `adapter` on the model in `model`: log-softmax by hand.
double naive_eval_loss(const std::string& model_dir, const std::string& adapter, const std::string& data, size_t count) {
  glint::CausalLM model = glint::from_pretrained(model_dir, {at::kDouble, c10::Device(c10::kCPU)});
  glint::LoraModel lora = glint::load_adapter(adapter, *model);
  lora.train(false);
  std::vector<glint::Sample> samples = glint::read_tokenized_jsonl(data, 16);
  at::NoGradGuard no_grad;
  double sum = 0, n = 0;
  for (size_t i = 0; i < std::min(count, samples.size()); ++i) {
    const auto& ids = samples[i].input_ids;
    const int64_t S = int64_t(ids.size());
    at::Tensor x = at::tensor(ids, at::kLong).view({1, S});
    at::Tensor logits = model->logits(model->forward(x, at::arange(S, at::kLong).view({1, S}), at::zeros({1, S}, at::kLong)).hidden)[0];
    for (int64_t t = 0; t + 1 < S; ++t) {
      at::Tensor row = logits[t];
      double lse = std::log(at::exp(row - row.max()).sum().item<double>()) + row.max().item<double>();
      sum += lse - row[ids[size_t(t + 1)]].item<double>();
      n += 1;
    }
  }
  return sum / n;
}

TEST(Evaluation, EvalLossEqualsANaiveComputationOnEveryMesh) {
  std::string dir = glint::testing::fresh_temp_dir("eval_loss");
  std::string model = make_model(dir);
  std::string train = make_data(dir + "/train.jsonl", 16, 1), eval = make_data(dir + "/eval.jsonl", 7, 2);
  const std::string common = "train --model " + model + " --data " + train + " --eval-data " + eval +
                             " --steps 4 --eval-every 2 --batch-size 4 --micro-batch-size 1 --lr 1e-2 --dtype float64"
                             " --lora-r 4 --seed 3 --output ";
  RunResult one = launch(1, common + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("eval_loss"), std::string::npos) << one.output;
  RunResult two = launch(2, common + dir + "/two --ep 2 --fsdp");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  RunResult first4 = launch(2, common + dir + "/first4 --eval-batches 1");
  ASSERT_EQ(first4.exit_code, 0) << first4.output;
  auto a = read_jsonl(dir + "/one/metrics.jsonl"), b = read_jsonl(dir + "/two/metrics.jsonl"),
       c = read_jsonl(dir + "/first4/metrics.jsonl");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    const bool evaluated = (s + 1) % 2 == 0;
    ASSERT_EQ(a[s].contains("eval_loss"), evaluated) << "step " << s + 1;
    if (!evaluated) continue;
    EXPECT_LT(rel(a[s]["eval_loss"].get<double>(), b[s]["eval_loss"].get<double>()), 1e-9) << "step " << s + 1;
    EXPECT_TRUE(c[s].contains("eval_loss")) << "step " << s + 1;
  }
  // 7 samples in batches of 4: the last batch is partial, filled with rows that count nothing.
  double naive = naive_eval_loss(model, dir + "/one/adapter", eval, 7);
  EXPECT_LT(rel(a[3]["eval_loss"].get<double>(), naive), 1e-10) << a[3]["eval_loss"] << " vs " << naive;
  double naive4 = naive_eval_loss(model, dir + "/first4/adapter", eval, 4);
  EXPECT_LT(rel(c[3]["eval_loss"].get<double>(), naive4), 1e-10) << c[3]["eval_loss"] << " vs " << naive4;
  EXPECT_GT(std::abs(naive4 - naive), 1e-6) << "--eval-batches 1 must evaluate fewer samples";
  std::printf("eval_loss %.15g (1 rank), %.15g (2 ranks, ep 2, fsdp), naive %.15g\n",
              a[3]["eval_loss"].get<double>(), b[3]["eval_loss"].get<double>(), naive);
}

TEST(Evaluation, InitAdapterContinuesFromItsWeights) {
  std::string dir = glint::testing::fresh_temp_dir("init_adapter");
  std::string model = make_model(dir);
  std::string train = make_data(dir + "/train.jsonl", 16, 1), eval = make_data(dir + "/eval.jsonl", 6, 2);
  RunResult first = launch(1, "train --model " + model + " --data " + train + " --eval-data " + eval +
                                  " --steps 3 --batch-size 4 --lr 1e-2 --dtype float64 --lora-r 3 --lora-alpha 5"
                                  " --output " + dir + "/first");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const double trained = read_jsonl(dir + "/first/metrics.jsonl").back()["eval_loss"].get<double>();
  // A vanishing learning rate: after one more step the adapter is where it was. Its rank
  // and alpha come from the adapter (the flags' 16 and 32 are replaced), on EP x FSDP.
  RunResult more = launch(2, "train --model " + model + " --data " + train + " --eval-data " + eval +
                                 " --steps 1 --batch-size 4 --lr 1e-30 --dtype float64 --ep 2 --fsdp --init-adapter " +
                                 dir + "/first/adapter --output " + dir + "/more");
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(more.output.find("LoRA r=3, alpha 5.0"), std::string::npos) << more.output;
  const double resumed = read_jsonl(dir + "/more/metrics.jsonl").back()["eval_loss"].get<double>();
  EXPECT_LT(rel(trained, resumed), 1e-12) << trained << " vs " << resumed;
  // From scratch it would be far from there.
  RunResult fresh = launch(1, "train --model " + model + " --data " + train + " --eval-data " + eval +
                                  " --steps 1 --batch-size 4 --lr 1e-30 --dtype float64 --output " + dir + "/fresh");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_GT(rel(trained, read_jsonl(dir + "/fresh/metrics.jsonl").back()["eval_loss"].get<double>()), 1e-3);
  // Errors: no adapter there; with --full.
  RunResult bad = launch(1, "train --model " + model + " --data " + train + " --init-adapter " + dir + " --output " + dir + "/bad");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("no adapter_config.json"), std::string::npos) << bad.output;
}

}  // namespace
