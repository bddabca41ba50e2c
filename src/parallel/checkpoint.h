// Activation checkpointing per decoder layer: a layer's forward runs without recording
// a graph; its backward re-runs the forward with the graph on and backpropagates through
// it. Only layer inputs are kept between forward and backward, so long sequences fit.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "model/causal_lm.h"

namespace glint {

class CheckpointRunner : public LayerRunner {
 public:
  // trainable[l]: every tensor requiring grad that layer l uses (its own parameters,
  // the adapters attached to it). Their gradients accumulate as without checkpointing.
  explicit CheckpointRunner(std::vector<std::vector<at::Tensor>> trainable);
  at::Tensor run(int64_t index, DecoderLayerImpl& layer, const at::Tensor& x,
                 const RotaryTables& rope, const at::Tensor& mask,
                 std::vector<at::Tensor>* router_logits) override;

 private:
  std::vector<std::vector<at::Tensor>> trainable_;
};

// The tensors requiring grad that decoder layer `index` uses: its parameters and the
// tensors `extra` lists under "model.layers.<index>." (e.g. LoraModel::named_parameters()).
std::vector<at::Tensor> layer_trainable_tensors(
    CausalLMImpl& model, int64_t index,
    const std::vector<std::pair<std::string, at::Tensor>>& extra);

}  // namespace glint
