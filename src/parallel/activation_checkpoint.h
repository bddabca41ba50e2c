// Activation checkpointing per decoder layer: each layer is recomputed in backward, so
// only layer inputs are kept between forward and backward and long sequences fit.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "parallel/recompute.h"

namespace glint {

class CheckpointRunner : public RecomputeRunner {
 public:
  // trainable[l]: every tensor requiring grad that layer l uses (its own parameters,
  // the adapters attached to it). Their gradients accumulate as without checkpointing.
  explicit CheckpointRunner(std::vector<std::vector<at::Tensor>> trainable)
      : trainable_(std::move(trainable)) {}
  std::vector<at::Tensor> grad_inputs(int64_t index) override { return trainable_.at(index); }
  void set_layer_adapters(std::vector<std::vector<at::Tensor>> per_layer) override { trainable_ = std::move(per_layer); }

 private:
  std::vector<std::vector<at::Tensor>> trainable_;
};

// The tensors requiring grad that decoder layer `index` uses: its parameters and those of
// `extra` (e.g. LoraModel::layer_parameters(index)) that require grad.
std::vector<at::Tensor> layer_trainable_tensors(CausalLMImpl& model, int64_t index,
                                                const std::vector<at::Tensor>& extra);

}  // namespace glint
