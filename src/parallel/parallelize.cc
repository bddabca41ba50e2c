#include "parallel/parallelize.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <set>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "dist/world.h"
#include "io/model_files.h"
#include "model/causal_lm.h"
#include "model/weights.h"
#include "parallel/activation_checkpoint.h"
#include "parallel/expert_parallel.h"
#include "parallel/fsdp.h"

namespace glint {

namespace {

// Collective: what each rank read of the model's checkpoint, for the setup report.
std::string sharded_load_line(Comm& comm, const CheckpointReader& checkpoint) {
  at::Tensor mine = at::tensor({int64_t(checkpoint.bytes_read())}, at::kLong);
  at::Tensor all = comm.all_gather(mine);
  const int W = comm.size();
  char buf[96];
  std::snprintf(buf, sizeof buf, "weights read of the checkpoint's %.3f MB:", double(checkpoint.tensor_bytes()) / 1e6);
  std::string line = buf;
  int64_t sum = 0;
  for (int r = 0; r < W; ++r) {
    const int64_t b = all[r].item<int64_t>();
    sum += b;
    if (W <= 16 || r < 4) {
      std::snprintf(buf, sizeof buf, "%s rank %d %.3f MB", r ? "," : "", r, double(b) / 1e6);
      line += buf;
    } else if (r == 4) {
      line += ", ...";
    }
  }
  std::snprintf(buf, sizeof buf, " (%.3f MB in all)", double(sum) / 1e6);
  return line + buf;
}

}  // namespace

void check_parallel_options(const ModelConfig& config, int world_size, const ParallelOptions& options) {
  validate_expert_mesh(config, world_size, options.ep, options.ep_layout);
}

ParallelLayout parallelize(CausalLMImpl& model, std::shared_ptr<Comm> world, const ParallelOptions& options,
                           CheckpointReader* checkpoint, bool full) {
  const int W = world->size();
  check_parallel_options(model.config, W, options);
  ParallelLayout layout;
  layout.world = world;
  layout.full = full;
  layout.expert_replicas = world;
  if (W > 1) {
    const World env = World::from_env();
    // A Comm made without the launcher's environment (tests) counts as one node.
    const int per_node = env.world_size == W ? env.local_world_size : W;
    layout.report.push_back(describe_mesh_layout(W, per_node, options.ep, options.ep_layout, options.fsdp));
  }
  // Experts first: each rank keeps (and reads) only its own.
  if (options.ep > 1) {
    layout.mesh = make_expert_mesh(world, options.ep, options.ep_layout);
    layout.ep = layout.mesh->axis_comm("ep");
    layout.expert_replicas = layout.mesh->axis_comm("ep_fsdp");
    shard_experts(model, layout.ep);
  }
  // Whole tensors; under FSDP the root's alone (its shards are read below).
  if (checkpoint) load_weights(model, *checkpoint, /*parameters=*/!options.fsdp);
  if (full)
    for (ParameterSite& site : parameter_sites(model)) site.tensor.set_requires_grad(true);
  if (options.fsdp) {
    const bool overlap = options.fsdp_overlap == "on" || (options.fsdp_overlap == "auto" && model.placement.device.is_cuda());
    layout.fsdp = std::make_shared<FsdpRunner>(model, world, full,
                                               std::vector<std::vector<at::Tensor>>(size_t(model.config.num_hidden_layers)),
                                               checkpoint, options.ep > 1 ? layout.expert_replicas : nullptr, overlap);
    layout.runner = layout.fsdp;
  } else if (options.recompute) {
    layout.runner = std::make_shared<CheckpointRunner>(
        std::vector<std::vector<at::Tensor>>(size_t(model.config.num_hidden_layers)));
  }
  if (layout.runner) model.layer_runner = layout.runner;
  if (checkpoint) checkpoint->check_unchanged();  // the shard loader has read its spans
  if (checkpoint && W > 1) layout.report.push_back(sharded_load_line(*world, *checkpoint));
  return layout;
}

void ParallelLayout::set_layer_adapters(CausalLMImpl& model,
                                        const std::function<std::vector<at::Tensor>(int64_t)>& adapters_of) {
  if (!runner) return;
  std::vector<std::vector<at::Tensor>> per_layer(size_t(model.config.num_hidden_layers));
  // FSDP gives its own shards their gradients; the layer's other trainable tensors (and,
  // recomputing without FSDP, its parameters when they train) are the runner's inputs.
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l)
    if (!(fsdp && full)) per_layer[size_t(l)] = layer_trainable_tensors(model, l, adapters_of(l));
  runner->set_layer_adapters(std::move(per_layer));
}

uint64_t ParallelLayout::bytes_sent() const {
  // A mesh axis spanning the whole world is the world communicator itself: count it once.
  std::set<const Comm*> comms{world.get(), ep.get(), expert_replicas.get()};
  uint64_t n = 0;
  for (const Comm* c : comms)
    if (c) n += c->total_bytes_sent();
  return n;
}

}  // namespace glint
