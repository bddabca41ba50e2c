// FSDP (ZeRO-3) for decoder layers: each layer's parameters are one flat buffer split
// evenly over the ranks; the full buffer is all-gathered just before the layer runs and
// freed right after, in forward and again in backward (where the layer is recomputed).
// With trainable base weights (full fine-tuning), the layer's gradient is reduce-scattered
// into the shard, the only copy the optimizer updates.
//
// Legend: W ranks, N_l elements in layer l (padded to a multiple of W).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "parallel/recompute.h"

namespace glint {

class CheckpointReader;
class Comm;

class FsdpRunner : public RecomputeRunner {
 public:
  // Shards every decoder layer of `model` over `comm`. Without `ckpt` the model must
  // hold the full weights, identical on every rank; with it, each rank reads only its
  // shard's bytes from the checkpoint (the model's layer weights may be lazy, unwritten).
  // trainable_base: the shards require grad. adapters[l]: replicated tensors requiring
  // grad that layer l uses (LoRA A/B).
  FsdpRunner(CausalLMImpl& model, std::shared_ptr<Comm> comm, bool trainable_base,
             std::vector<std::vector<at::Tensor>> adapters, const CheckpointReader* ckpt = nullptr);

  void before_compute(int64_t index) override { gather(index); }
  void after_compute(int64_t index) override { release(index); }
  std::vector<at::Tensor> grad_inputs(int64_t index) override;
  bool has_shard(int64_t) const override { return trainable_base_; }
  std::vector<at::Tensor>* shard_params(int64_t index) override;
  at::Tensor reduce_shard_grad(int64_t index) override { return reduce_scatter_grads(index); }

  // This rank's shard of each layer: [N_l / W]. Requires grad when the base trains.
  const std::vector<at::Tensor>& shards() const { return shards_; }

  // Collective: puts layer l's full weights back into its parameters (gather), or frees
  // them again (release). Used around a layer's compute and to export the model.
  void gather(int64_t layer);
  void release(int64_t layer);
  // Reduce-scatters the gradients of layer l's (gathered) parameters: [N_l / W].
  at::Tensor reduce_scatter_grads(int64_t layer);

 private:
  struct Unit;
  std::shared_ptr<Comm> comm_;
  bool trainable_base_;
  std::vector<std::shared_ptr<Unit>> units_;
  std::vector<at::Tensor> shards_;
  std::vector<std::vector<at::Tensor>> adapters_;
};

}  // namespace glint
