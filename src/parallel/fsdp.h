// FSDP (ZeRO-3): each decoder layer's parameters are flat buffers split evenly over the
// ranks of a group; the full buffers are all-gathered just before the layer runs and
// freed right after, in forward and again in backward (where the layer is recomputed).
// With `overlap`, while layer i computes, the all-gather of the layer that runs next
// (i+1 in forward, i-1 in backward) is in flight, so at most two layers are whole at
// once; and each layer's gradient reduce-scatter runs while the layers before it compute
// their backward (at most two in flight), its result added to the shard's gradient by
// end_root or settle_gradients().
// The root unit (embeddings, final norm, lm_head) is sharded the same way and gathered
// for the length of a step (begin_root / end_root). With trainable base weights (full
// fine-tuning), each buffer's gradient is reduce-scattered into its shard, the only copy
// the optimizer updates.
//
// Under expert parallelism a layer has two parts: its non-expert parameters, sharded over
// all ranks, and its local experts, sharded over the ep_fsdp group (a group of one keeps
// them whole, gathered without a copy).
//
// Legend: W ranks of a part's group, N elements of a part (padded to a multiple of W).
#pragma once

#include <ATen/core/Tensor.h>

#include <deque>
#include <functional>
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
  // hold the full weights, identical on every rank of a part's group; with it, each
  // rank reads only its shards' bytes from the checkpoint (the model's layer weights may
  // be lazy, unwritten). trainable_base: the shards require grad. adapters[l]: replicated
  // tensors requiring grad that layer l uses (LoRA A/B). expert_comm: when set, expert
  // parameters form a separate part per layer sharded over it (the experts must already
  // be this EP rank's slice); when null they are sharded with the rest of the layer.
  // overlap: prefetch and asynchronous reduce-scatter (above).
  FsdpRunner(CausalLMImpl& model, std::shared_ptr<Comm> comm, bool trainable_base,
             std::vector<std::vector<at::Tensor>> adapters, const CheckpointReader* ckpt = nullptr,
             std::shared_ptr<Comm> expert_comm = nullptr, bool overlap = false);
  ~FsdpRunner() override;

  void before_compute(int64_t index, bool in_backward) override;
  void after_compute(int64_t index) override { release(index); }
  std::vector<at::Tensor> grad_inputs(int64_t index) override;
  // Runs fn while every released parameter has its full shape again, backed by no memory
  // (one element, zero strides): for code that reads shapes only, such as building
  // adapters for the layers. The parameters are released again after, also on a throw.
  void with_layer_shapes(const std::function<void()>& fn);
  void set_layer_adapters(std::vector<std::vector<at::Tensor>> per_layer) override { adapters_ = std::move(per_layer); }
  int64_t num_shards(int64_t index) const override;
  std::vector<at::Tensor>* shard_params(int64_t index) override;
  // Starts the reduce-scatter of layer `index`'s gradients; returns undefined tensors.
  std::vector<at::Tensor> reduce_shard_grads(int64_t index) override;
  // Waits for the oldest reduce-scatters in flight until `keep` are left, adding their
  // results to the shards' gradients (end_root settles all before the optimizer reads them).
  void settle_gradients(size_t keep = 0);

  // Around every use of the model (a training step, an evaluation, an export): gathers
  // the root unit; end_root reduce-scatters its gradients (full training) and frees it.
  void begin_root();
  void end_root();
  int64_t root_unit() const { return int64_t(units_.size()) - 1; }
  bool overlaps() const { return overlap_; }  // the next layer gathered while one computes
  int64_t num_units() const { return int64_t(units_.size()); }

  // Collective: full tensors per parameter name from one shard-shaped tensor per entry of
  // shards() (the shards themselves, or their gradients). Expert parameters come back
  // as this EP rank's slice.
  std::vector<std::pair<std::string, at::Tensor>> gather_named(const std::vector<at::Tensor>& per_shard);

  // This rank's shards, unit by unit (layers, then the root), each unit's parts in
  // order: [N / W]. Require grad when the base trains.
  const std::vector<at::Tensor>& shards() const { return shards_; }
  // Where shards()[i]'s elements lie in the model's parameters: one span per parameter it
  // overlaps, padding left out. full_shape and full_offset place the span in the whole
  // tensor of that name (every expert), so a checkpoint written on one mesh reads on another.
  struct ShardSpan {
    std::string name;
    std::vector<int64_t> full_shape;
    int64_t full_offset = 0;   // flat, in the whole tensor
    int64_t shard_offset = 0;  // in the shard
    int64_t count = 0;
  };
  const std::vector<ShardSpan>& shard_spans(size_t i) const { return spans_.at(i); }

  // Collective: puts unit u's full weights back into its parameters (gather), or frees
  // them again (release). Used around a layer's compute and to export the model. A
  // gather started ahead (prefetch) is waited for rather than started again.
  void gather(int64_t unit);
  void release(int64_t unit);
  // Reduce-scatters the gradients of unit u's (gathered) parameters, one per part.
  std::vector<at::Tensor> reduce_scatter_grads(int64_t unit);
  // How many gathers so far found their unit already prefetched.
  int64_t prefetched_gathers() const { return prefetched_gathers_; }

 private:
  struct Part;
  struct Unit;
  struct InFlight;
  // Starts the all-gathers of unit u (nothing for parts whose group is one rank).
  void prefetch(int64_t unit);
  // A reduce-scatter's result for a shard, added to its gradient.
  void accumulate(size_t shard, const at::Tensor& grad);
  std::unique_ptr<InFlight> prefetched_;
  int64_t prefetched_gathers_ = 0;
  std::deque<std::unique_ptr<InFlight>> reducing_;  // oldest first
  bool trainable_base_, overlap_;
  std::vector<std::shared_ptr<Unit>> units_;
  std::vector<at::Tensor> shards_;
  std::vector<std::vector<ShardSpan>> spans_;  // per shard
  std::vector<std::vector<at::Tensor>> adapters_;
};

}  // namespace glint
