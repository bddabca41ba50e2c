// The trainer's everyday behaviour: padding to the longest row, the sequence length and
// what it cuts, LoRA dropout replayed by recompute, the router loss from the options,
// the memory plan.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "data/collate.h"
#include "data/lengths.h"
#include "data/synthetic.h"
#include "model/causal_lm.h"
#include "train/memory_estimate.h"
#include "train/run_dir.h"
#include "train/trainer.h"

#include "test_util.h"
#include "train/small_train_options.h"

namespace glint {
namespace {

TrainOptions everyday_options(const std::string& name) {
  TrainOptions o = testing::small_train_options("everyday_" + name);
  o.data.eval_samples = 0;
  return o;
}

// Samples of different lengths, some with prompt tokens masked.
std::vector<Sample> ragged_samples() {
  std::vector<Sample> out;
  for (int64_t n : {5, 9, 3, 12, 7, 4}) {
    Sample s;
    for (int64_t i = 0; i < n; ++i) {
      s.input_ids.push_back(1 + (i * 7 + n) % 29);
      s.labels.push_back(i < n / 3 ? kIgnoreIndex : s.input_ids.back());
    }
    out.push_back(s);
  }
  return out;
}

// The loss and every gradient of one batch layout (float64).
struct LossAndGrads {
  double loss;
  std::vector<at::Tensor> grads;
};
LossAndGrads run_batches(CausalLMImpl& m, const std::vector<Batch>& batches) {
  std::vector<at::Tensor> params;
  for (auto& p : m.parameters()) params.push_back(p);
  at::Tensor total = at::zeros({}, at::kDouble);
  for (const Batch& b : batches)
    total = total + causal_lm_loss(m, b.input_ids, b.labels, b.position_ids, b.segment_ids).ce_sum;
  std::vector<at::Tensor> g = torch::autograd::grad({total}, params);
  return {total.item<double>(), g};
}

// Padding each micro-batch to its longest row (the default) gives the losses and
// gradients of padding every row to --seq-len: the dropped columns are padding.
TEST(Everyday, PaddingToTheLongestRowEqualsPaddingToSeqLen) {
  ModelConfig c = tiny_moe_config(32);
  CausalLM m(c, TensorPlacement{at::kDouble});
  init_weights(*m, 3);
  for (auto& p : m->parameters()) p.set_requires_grad(true);
  std::vector<Sample> samples = ragged_samples();
  std::vector<const Sample*> ptrs;
  for (const auto& s : samples) ptrs.push_back(&s);
  for (bool pack : {false, true}) {
    CollateOptions fixed;
    fixed.seq_len = 24;
    fixed.pack = pack;
    fixed.pad_to_longest = false;
    CollateOptions longest = fixed;
    longest.pad_to_longest = true;
    std::vector<Batch> a = collate(ptrs, fixed, 2), b = collate(ptrs, longest, 2);
    ASSERT_EQ(a.size(), b.size());
    bool narrower = false;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].input_ids.size(1), 24);
      narrower |= b[i].input_ids.size(1) < 24;
    }
    EXPECT_TRUE(narrower) << "pack " << pack;
    LossAndGrads la = run_batches(*m, a), lb = run_batches(*m, b);
    EXPECT_NEAR(la.loss, lb.loss, 1e-12 * la.loss) << "pack " << pack;
    for (size_t i = 0; i < la.grads.size(); ++i) {
      if (!la.grads[i].defined()) continue;
      double scale = std::max(1e-30, la.grads[i].norm().item<double>());
      EXPECT_LT((la.grads[i] - lb.grads[i]).norm().item<double>() / scale, 1e-10) << "pack " << pack << " grad " << i;
    }
  }
}

TEST(Everyday, AutomaticSeqLenAndTheCutReport) {
  EXPECT_EQ(automatic_seq_len(817, 40960), 824);
  EXPECT_EQ(automatic_seq_len(816, 40960), 816);
  EXPECT_EQ(automatic_seq_len(50000, 40960), 40960);
  EXPECT_EQ(automatic_seq_len(1, 0), 8);
  std::vector<Sample> samples = ragged_samples();  // lengths 5 9 3 12 7 4
  for (size_t i = 0; i < samples.size(); ++i) samples[i].line = int64_t(i) + 1;
  // The 12-token sample trains tokens 4..11; cut to 4 it keeps none and is dropped.
  LengthReport r = fit_to_length(&samples, 4);
  EXPECT_EQ(r.longest, 12);
  EXPECT_EQ(r.longest_line, 4);
  EXPECT_EQ(r.cut, 4);  // 5, 9, 12, 7
  EXPECT_EQ(r.cut_tokens, 1 + 5 + 8 + 3);
  EXPECT_EQ(r.lost, 1);
  ASSERT_EQ(r.lost_lines, (std::vector<int64_t>{4}));
  EXPECT_EQ(samples.size(), 5u);
  for (const auto& s : samples) EXPECT_LE(s.input_ids.size(), 4u);
  std::string w = r.lost_warning("chat.jsonl");
  EXPECT_NE(w.find("chat.jsonl line 4"), std::string::npos) << w;
  EXPECT_NE(r.summary().find("4 cut to 4 tokens"), std::string::npos) << r.summary();
}

// Dropout draws from the default generator; a recomputed layer must draw the same
// masks, or its gradients belong to a different forward. With activation checkpointing
// the run equals the run without it, in float64; without the replay it would not.
TEST(Everyday, LoraDropoutIsReplayedWhenLayersAreRecomputed) {
  auto run = [](bool checkpointing, double dropout) {
    TrainOptions o = everyday_options(std::string("dropout") + (checkpointing ? "_ckpt" : ""));
    o.parallel.recompute = checkpointing;
    o.lora.dropout = dropout;
    o.lora.target_parameters.clear();  // PEFT refuses dropout on expert adapters
    Trainer t(o);
    at::manual_seed(11);
    std::vector<double> losses;
    for (int s = 0; s < 3; ++s) losses.push_back(t.step(t.next_micro_batches()).loss);
    std::vector<at::Tensor> params;
    for (auto& p : t.trainable_parameters()) params.push_back(p.detach().clone());
    return std::make_pair(losses, params);
  };
  auto plain = run(false, 0.3), recomputed = run(true, 0.3), none = run(false, 0.0);
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(plain.first[s], recomputed.first[s], 1e-12) << "step " << s;
  double diff = 0, moved = 0;
  for (size_t i = 0; i < plain.second.size(); ++i) {
    diff = std::max(diff, (plain.second[i] - recomputed.second[i]).abs().max().item<double>());
    moved = std::max(moved, (plain.second[i] - none.second[i]).abs().max().item<double>());
  }
  EXPECT_LT(diff, 1e-12);
  EXPECT_GT(moved, 1e-6) << "dropout changed nothing";
}

TEST(Everyday, DropoutOnExpertAdaptersIsRefused) {
  TrainOptions o = everyday_options("dropout_experts");
  o.lora.dropout = 0.1;
  std::string e = glint::testing::error_message([&] { Trainer t(o); });
  EXPECT_NE(e.find("PEFT"), std::string::npos) << e;
  EXPECT_NE(e.find("gate_up_proj"), std::string::npos) << e;
}

// --router-aux-loss-coef turns the load-balancing loss on (and off) over config.json.
TEST(Everyday, RouterAuxLossFromTheOptions) {
  TrainOptions o = everyday_options("aux_on");
  o.optim.router_aux_loss_coef = 0.01;
  Trainer on(o);
  EXPECT_GT(on.step(on.next_micro_batches()).aux_loss, 1.0);
  TrainOptions off = everyday_options("aux_off");
  ModelConfig c = tiny_moe_config(ReverseDigitsTask::kVocabSize);
  c.output_router_logits = true;
  off.model.config = c;
  off.optim.router_aux_loss_coef = 0;
  Trainer t(off);
  EXPECT_LT(t.step(t.next_micro_batches()).aux_loss, 0);  // < 0: not computed
}

// A step's gradients are there only once made: with one micro-batch a layer's appear in
// its backward, after the later layers' activations are gone, so the step needs less than
// when earlier micro-batches' gradients sit beside every activation.
TEST(Everyday, EstimateCountsGradientsOnlyOnceTheStepHasMadeThem) {
  CausalLM model(tiny_moe_config(ReverseDigitsTask::kVocabSize), TensorPlacement{});
  MemoryInputs in;
  in.seq_len = 512;
  in.rows = 8;
  in.full = true;
  for (const at::Tensor& p : model->parameters()) {
    in.gradient_bytes += int64_t(p.numel()) * int64_t(p.element_size());
    in.largest_gradient_numel = std::max(in.largest_gradient_numel, int64_t(p.numel()));
  }
  // Gradients of the activations' order (the tiny model's own are a few kB), spread over
  // the layers and the root as its parameters are.
  in.gradient_bytes = int64_t(8) << 20;
  auto step = [](const MemoryEstimate& e) { return e.gradients_mb + e.activations_mb + e.loss_mb; };
  const double G = 8;
  in.micro_batches = 1;
  const MemoryEstimate one = estimate_memory(*model, in);
  in.micro_batches = 4;
  const MemoryEstimate accumulating = estimate_memory(*model, in);
  EXPECT_GE(accumulating.gradients_mb, G);
  EXPECT_GE(step(accumulating), step(one) + 0.25 * G);
  EXPECT_LT(one.gradients_mb, G);
  EXPECT_GT(step(one), G);
  // Gradients far larger than any activation: the step peaks where the last of them are
  // made, in the first layer's backward, with only that layer's tensors beside them.
  in.micro_batches = 1;
  in.gradient_bytes = int64_t(1) << 34;
  const MemoryEstimate late = estimate_memory(*model, in);
  EXPECT_GE(late.gradients_mb, 16384.0);
  EXPECT_LT(late.activations_mb, one.activations_mb);
}

// The micro-batch follows the budget: a generous one takes the whole share, a tight one
// splits it, and the estimate grows with the micro-batch.
TEST(Everyday, MicroBatchIsChosenFromTheMemoryBudget) {
  TrainOptions o = everyday_options("budget_big");
  o.memory.budget = "64G";
  EXPECT_EQ(Trainer(o).micro_batch_size(), 8);
  // The estimate for the trainer's model in its dtype (float64), without its adapters.
  CausalLM model(tiny_moe_config(ReverseDigitsTask::kVocabSize), TensorPlacement{c10::kDouble});
  MemoryInputs in;
  in.seq_len = 512;
  in.dtype_bytes = 8;
  in.rows = 1;
  double one = estimate_memory(*model, in).total_mb();
  in.rows = 8;
  double eight = estimate_memory(*model, in).total_mb();
  EXPECT_GT(eight, one);
  // A budget halfway between the two: fewer rows than the share, and at least one.
  TrainOptions tight = everyday_options("budget_tight");
  tight.data.seq_len = 512;
  tight.memory.budget = std::to_string(int64_t(std::ceil(one + (eight - one) / 2))) + "M";
  Trainer t(tight);
  EXPECT_LT(t.micro_batch_size(), 8);
  EXPECT_GE(t.micro_batch_size(), 1);
  EXPECT_EQ(8 % t.micro_batch_size(), 0);
  EXPECT_NE(glint::testing::error_message([] { parse_memory_size("lots", "--memory-budget"); }).find("lots"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(parse_memory_size("2G", "x"), 2048);
  EXPECT_DOUBLE_EQ(parse_memory_size("1500MB", "x"), 1500);
  EXPECT_DOUBLE_EQ(parse_memory_size("300", "x"), 300);
}

// A directory with tiktoken.model and no tokenizer.json (Kimi-K2's form) is a tokenizer:
// --tokenizer takes it, and a run's saved model gets the file with the rest.
TEST(Everyday, ATiktokenDirectoryIsATokenizer) {
  const std::string tok = glint::testing::fresh_temp_dir("everyday_tiktoken");
  TrainOptions o = everyday_options("tiktoken");
  o.data.tokenizer = tok;
  EXPECT_NE(glint::testing::error_message([&] { o.validate(); }).find("no tokenizer.json (or tiktoken.model)"),
            std::string::npos);
  std::ofstream(tok + "/tiktoken.model") << "QQ== 0\n";
  std::ofstream(tok + "/tokenizer_config.json") << "{}";
  EXPECT_NO_THROW(o.validate());
  const std::string to = glint::testing::fresh_temp_dir("everyday_tiktoken_copy");
  EXPECT_EQ(copy_tokenizer_files(tok, to), 2);
  EXPECT_TRUE(std::filesystem::is_regular_file(to + "/tiktoken.model"));
}

}  // namespace
}  // namespace glint
