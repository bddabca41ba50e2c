// The parallelize step: how a built model is laid out over the ranks, in one place.
// Given the model (its weights lazy when a checkpoint is read), the world and the
// parallel options, it checks that the mesh fits the model, builds the expert mesh,
// keeps each rank's experts, reads each rank's weights (whole tensors, or under FSDP its
// shards), and installs the layer runner: FSDP units, or recomputation in backward.
// Trainable tensors that layers use (adapters; a --full run's parameters) are attached
// after, and again whenever they change (set_layer_adapters).
//
// Model code knows nothing of ranks: everything rank-aware the model does (the expert
// dispatcher, the layer runner) is installed here.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/parallel_options.h"

namespace glint {

class CausalLMImpl;
class CheckpointReader;
class Comm;
class DeviceMesh;
class FsdpRunner;
class RecomputeRunner;
struct ModelConfig;

// The groups a parallelized model computes over, and what parallelize() reports.
struct ParallelLayout {
  std::shared_ptr<Comm> world;
  std::shared_ptr<DeviceMesh> mesh;       // under expert parallelism
  std::shared_ptr<Comm> ep;               // this rank's EP group (null without EP)
  std::shared_ptr<Comm> expert_replicas;  // ranks holding the same experts (world without EP)
  std::shared_ptr<FsdpRunner> fsdp;       // null without FSDP
  std::shared_ptr<RecomputeRunner> runner;  // FSDP's, the recompute runner, or null
  bool full = false;
  std::vector<std::string> report;        // lines for the run's setup report

  // Attaches the trainable tensors each decoder layer uses besides its own parameters
  // (`adapters_of(l)`: LoRA A/B of layer l), so that recomputation in backward and FSDP
  // give them gradients. Call again whenever adapters come or go.
  void set_layer_adapters(CausalLMImpl& model, const std::function<std::vector<at::Tensor>(int64_t)>& adapters_of);
  // Bytes this rank has sent over all of its communicators (each counted once).
  uint64_t bytes_sent() const;
};

// Throws glint::Error (a usage error) naming the values unless the model's experts split
// evenly over `ep` of `world_size` ranks. Cheap: a run checks it before reading data.
void check_parallel_options(const ModelConfig& config, int world_size, const ParallelOptions& options);

// Collective over `world`. `checkpoint`: the model's weights are lazy and read from it
// (each rank only what it keeps); null: the model already holds its weights. `full`:
// every parameter of the model trains (a --full run): they require grad, and under FSDP
// each rank's shards are the trainable tensors.
ParallelLayout parallelize(CausalLMImpl& model, std::shared_ptr<Comm> world, const ParallelOptions& options,
                           CheckpointReader* checkpoint, bool full = false);

}  // namespace glint
