// AdamW with decoupled weight decay, and the learning rate schedule (linear warmup, then
// cosine decay). Clipping is the step engine's (train/step_engine.h): its norm is over ranks.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "train/adamw_options.h"

namespace glint {

// Elements an update handles at a time: its float32 temporaries (and a narrower
// gradient's float32 copy) are at most this size whatever the tensor's. Whole tensors at
// once made two float32 temporaries of the largest: 2 GB of a 5.4 GB step peak for
// gpt-oss-120b-layers --full (docs/BENCHMARKS.md). Every operation is elementwise, so the
// blocks give the same numbers.
constexpr int64_t kAdamWBlockElements = int64_t(1) << 20;

// Keeps float32 moments for each parameter. A parameter narrower than float32 (bf16,
// float16) also gets a float32 master copy: the update is applied to the master and the
// parameter is its rounding, so updates below the parameter's resolution accumulate
// instead of vanishing. float32 and float64 parameters are their own masters.
class AdamW {
 public:
  AdamW(std::vector<at::Tensor> params, AdamWOptions options);
  // One update with learning rate `lr`; parameters without a gradient are skipped.
  void step(double lr);
  void zero_grad();
  // Options for the next steps (a service tenant sends them with every update).
  void set_options(const AdamWOptions& options);
  const AdamWOptions& options() const { return options_; }
  // Moments, masters and step count copied from an optimizer of like-shaped parameters.
  void copy_state_from(const AdamW& other);
  int64_t steps_taken() const { return step_; }
  // A resumed run continues the bias correction from the saved count.
  void set_steps_taken(int64_t steps) { step_ = steps; }
  const std::vector<at::Tensor>& params() const { return params_; }
  // Moment tensors, for checkpoints and tests.
  const std::vector<at::Tensor>& exp_avg() const { return m_; }
  const std::vector<at::Tensor>& exp_avg_sq() const { return v_; }
  // The float32 master of parameter i (the parameter itself when it is float32 or wider).
  const at::Tensor& master(size_t i) const { return master_[i].defined() ? master_[i] : params_[i]; }
  bool has_master(size_t i) const { return master_[i].defined(); }
  // Bytes of the state beside the parameters: moments and masters.
  int64_t state_bytes() const;

 private:
  std::vector<at::Tensor> params_, m_, v_, master_;
  AdamWOptions options_;
  int64_t step_ = 0;
};

struct LrSchedule {
  double peak_lr = 1e-4;
  int64_t warmup_steps = 0;   // linear from peak/warmup to peak over these steps
  int64_t total_steps = 1;    // cosine from peak to min_lr over the rest
  double min_lr_ratio = 0.0;  // min_lr = peak_lr * min_lr_ratio
  // Learning rate of 1-based optimizer step `step`: step/warmup * peak during warmup,
  // then min + (peak - min) * (1 + cos(pi * (step - warmup - 1) / (total - warmup))) / 2.
  double at(int64_t step) const;
};

}  // namespace glint
