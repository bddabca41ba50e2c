// Expert parallelism: the experts of every MoE layer are split over the `ep` axis of the
// mesh (EP rank k owns the E/ep consecutive experts [k*E/ep, (k+1)*E/ep)), and routed
// token copies travel to their expert's rank and back through all-to-all.
//
// Mesh: W = ep_fsdp x ep. Layout "contiguous" (default): an EP group is ep consecutive
// ranks, so the all-to-all stays inside a node; ep_fsdp groups are strided. Layout
// "strided": the reverse.
//
// Legend: T tokens, H hidden, E experts, E_local = E/ep, K top-k, N = T*K routed copies.
#pragma once

#include <memory>
#include <string>

#include "model/moe.h"

namespace glint {

class CausalLMImpl;
class Comm;
class DeviceMesh;
struct ModelConfig;

// Throws glint::Error naming the values unless experts split evenly: E % ep == 0,
// W % ep == 0, ep <= E, top_k <= E, and the model has MoE layers when ep > 1.
void validate_expert_mesh(const ModelConfig& config, int world_size, int64_t ep,
                          const std::string& layout);

// One line naming where the job's groups run, for the run's setup report: the ranks per
// node, the EP groups and whether each stays inside a node (its all-to-all on the node's
// links), where the expert replicas (ep_fsdp) and FSDP's shards lie. Ranks are numbered
// node by node, `ranks_per_node` to a node. Pure: no communication.
std::string describe_mesh_layout(int world_size, int ranks_per_node, int64_t ep, const std::string& layout,
                                 bool fsdp);

// Collective over `world`: the mesh {"ep_fsdp": W/ep, "ep": ep} ordered by `layout`.
std::shared_ptr<DeviceMesh> make_expert_mesh(std::shared_ptr<Comm> world, int64_t ep,
                                             const std::string& layout);

// Keeps only this EP rank's experts in every MoE layer of `model` (a dim-0 slice; lazy
// weights stay unwritten) and installs the all-to-all dispatcher over `ep_comm`.
// REQUIRES: validate_expert_mesh passed; no adapters attached yet.
void shard_experts(CausalLMImpl& model, std::shared_ptr<Comm> ep_comm);

// Dispatch over the EP group: copies are sorted by expert, the per-expert counts are
// exchanged (one all-to-all of E integers per layer, the only host synchronisation), the
// copies are sent to their experts' ranks (all-to-all with uneven splits, differentiable)
// and regrouped by local expert. combine() runs the same steps in reverse.
class AllToAllTokenDispatcher : public TokenDispatcher {
 public:
  AllToAllTokenDispatcher(std::shared_ptr<Comm> ep_comm, int64_t num_experts);
  Dispatched dispatch(const at::Tensor& x, const Routing& routing) override;
  at::Tensor combine(const at::Tensor& expert_out, const Dispatched& d, int64_t num_tokens) override;

 private:
  std::shared_ptr<Comm> comm_;
  int64_t num_experts_;
};

}  // namespace glint
