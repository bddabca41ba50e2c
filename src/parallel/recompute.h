// A decoder layer run without keeping its autograd graph: forward runs under no-grad,
// backward re-runs the forward with the graph on and backpropagates through it. Only the
// layer's input is kept in between. Subclasses choose what happens around each run:
// activation checkpointing does nothing more; FSDP gathers the layer's sharded weights
// before and frees them after, and reduces their gradients into the shard.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "model/causal_lm.h"

namespace glint {

class RecomputeRunner : public LayerRunner {
 public:
  at::Tensor run(int64_t index, DecoderLayerImpl& layer, const at::Tensor& x, const LayerContext& ctx,
                 std::vector<at::Tensor>* router_logits) final;

  // Called around every forward of layer `index`: in_backward for the recompute in
  // backward (layers then come in reverse order).
  virtual void before_compute(int64_t index, bool in_backward) {}
  virtual void after_compute(int64_t index) {}
  // Tensors requiring grad, besides the layer input, whose gradients backward returns.
  // The first num_shards(index) are shards whose gradients are reduce_shard_grads().
  virtual std::vector<at::Tensor> grad_inputs(int64_t index) = 0;
  // The replicated tensors requiring grad that each layer uses, anew (adapters came or
  // went); per_layer[l] for layer l. REQUIRES: a frozen base (LoRA).
  virtual void set_layer_adapters(std::vector<std::vector<at::Tensor>> per_layer) = 0;
  virtual int64_t num_shards(int64_t index) const { return 0; }
  // With shards: the layer's (gathered) parameters, whose gradients feed the shards'.
  virtual std::vector<at::Tensor>* shard_params(int64_t index) { return nullptr; }
  // With shards: turns the gradients held in *shard_params(index) into the shards', one
  // per shard in grad_inputs order. An undefined one means the runner accumulates that
  // shard's gradient itself, later (an asynchronous reduction).
  virtual std::vector<at::Tensor> reduce_shard_grads(int64_t index) { return {}; }
};

}  // namespace glint
