// FSDP (ZeRO-3): each decoder layer's parameters are one flat buffer split evenly over
// the ranks; the full buffer is all-gathered just before the layer runs and freed right
// after, in forward and again in backward (where the layer is recomputed). The root unit
// (embeddings, final norm, lm_head) is sharded the same way and gathered for the length
// of a step (begin_root / end_root). With trainable base weights (full fine-tuning), each
// unit's gradient is reduce-scattered into its shard, the only copy the optimizer updates.
//
// Legend: W ranks, N_l elements in layer l (padded to a multiple of W).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
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

  // Around every use of the model (a training step, an evaluation, an export): gathers
  // the root unit; end_root reduce-scatters its gradients (full training) and frees it.
  void begin_root();
  void end_root();
  int64_t root_unit() const { return int64_t(units_.size()) - 1; }
  int64_t num_units() const { return int64_t(units_.size()); }

  // Collective: full tensors per parameter name from one shard-shaped tensor per unit
  // (the shards themselves, or their gradients).
  std::vector<std::pair<std::string, at::Tensor>> gather_named(const std::vector<at::Tensor>& per_unit);

  // This rank's shard of each unit (layers, then the root): [N_u / W]. Requires grad
  // when the base trains.
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
