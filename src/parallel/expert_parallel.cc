#include "parallel/expert_parallel.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <set>
#include <string>

#include "core/error.h"
#include "core/row_gather.h"
#include "dist/autograd.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "model/causal_lm.h"

namespace glint {

void validate_expert_mesh(const ModelConfig& c, int W, int64_t ep, const std::string& layout) {
  GLINT_CHECK(layout == "contiguous" || layout == "strided", "--ep-layout must be contiguous or strided, got '",
              layout, "'");
  GLINT_CHECK(ep >= 1, "--ep must be >= 1, got ", ep);
  if (ep == 1) return;
  bool has_moe = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) has_moe |= c.is_moe_layer(l);
  GLINT_CHECK(has_moe, "--ep ", ep, ": this ", c.model_type, " model has no MoE layers to shard");
  GLINT_CHECK(W % ep == 0, "--ep (", ep, ") must divide the number of ranks (", W, "); ep_fsdp = W / ep");
  GLINT_CHECK(ep <= c.num_experts, "--ep (", ep, ") exceeds num_experts (", c.num_experts,
              "): every EP rank needs at least one expert");
  GLINT_CHECK(c.num_experts % ep == 0, "num_experts (", c.num_experts, ") must be divisible by --ep (", ep,
              "): EP ranks would hold ", c.num_experts / ep, " or ", c.num_experts / ep + 1, " experts");
  GLINT_CHECK(c.num_experts_per_tok <= c.num_experts, "num_experts_per_tok (", c.num_experts_per_tok,
              ") exceeds num_experts (", c.num_experts, ")");
}

std::string describe_mesh_layout(int W, int per_node, int64_t ep, const std::string& layout, bool fsdp) {
  GLINT_ASSERT(W >= 1 && per_node >= 1 && W % per_node == 0 && ep >= 1 && W % ep == 0);
  const int nodes = W / per_node, n = int(W / ep);
  auto node = [&](int r) { return r / per_node; };
  auto plural = [](int k, const char* what) { return std::to_string(k) + " " + what + (k == 1 ? "" : "s"); };
  std::string s = "layout: " + plural(W, "rank") + " on " + plural(nodes, "node") +
                  (nodes > 1 ? " of " + std::to_string(per_node) : "");
  if (ep > 1) {
    // Group g: ranks g*ep .. (contiguous) or g, g+n, .. (strided).
    std::string groups;
    int split = 0;
    for (int g = 0; g < n; ++g) {
      std::string members;
      std::set<int> on;
      for (int k = 0; k < ep; ++k) {
        int r = layout == "strided" ? g + k * n : g * int(ep) + k;
        members += (k ? "," : "") + std::to_string(r);
        on.insert(node(r));
      }
      split += on.size() > 1;
      if (g < 4) groups += (g ? " " : "") + std::string("[") + members + "]";
    }
    if (n > 4) groups += " ...";
    s += "; EP groups of " + std::to_string(ep) + " " + groups;
    if (nodes > 1)
      s += split == 0 ? " each inside a node (all-to-all on the node's links)"
                      : ", " + std::to_string(split) + " of " + std::to_string(n) + " spanning nodes" +
                            (layout == "strided" ? " (--ep-layout strided)"
                             : ep > per_node ? " (an EP group of " + std::to_string(ep) + " does not fit in a node's " +
                                                   std::to_string(per_node) + " ranks)"
                                             : " (--ep does not divide the ranks per node)");
    if (n > 1) {
      bool across = false;  // does an ep_fsdp group (same EP position) span nodes?
      for (int r = 0; r < W; ++r) across |= node(r) != node(layout == "strided" ? r / n * n : r % int(ep));
      s += "; expert replicas over " + std::to_string(n) + " ranks" + (nodes > 1 ? across ? " across nodes" : " inside a node" : "");
    }
  }
  if (fsdp)
    s += "; FSDP shards " + std::string(ep > 1 ? "the non-expert weights" : "the weights") + " over all " +
         plural(W, "rank") + (nodes > 1 ? " (across nodes)" : "") +
         (ep > 1 && n > 1 ? ", the experts over their replicas" : "");
  else if (W > 1 && ep == 1) s += "; data parallel over " + plural(W, "rank");
  return s;
}

std::shared_ptr<DeviceMesh> make_expert_mesh(std::shared_ptr<Comm> world, int64_t ep,
                                             const std::string& layout) {
  int W = world->size(), n = int(W / ep);
  std::vector<std::pair<std::string, int>> axes =
      layout == "strided" ? std::vector<std::pair<std::string, int>>{{"ep", int(ep)}, {"ep_fsdp", n}}
                          : std::vector<std::pair<std::string, int>>{{"ep_fsdp", n}, {"ep", int(ep)}};
  return std::make_shared<DeviceMesh>(std::move(world), std::move(axes));
}

void shard_experts(CausalLMImpl& model, std::shared_ptr<Comm> ep_comm) {
  const int64_t ep = ep_comm->size(), E = model.config.num_experts, local = E / ep;
  GLINT_ASSERT(E % ep == 0);
  const int64_t first = ep_comm->rank() * local;
  at::NoGradGuard no_grad;
  auto keep = [&](at::Tensor& p) {
    std::vector<int64_t> shape = p.sizes().vec();
    shape[0] = local;
    // Lazy weights are not written yet: give them storage of the local shape only.
    at::Tensor mine = model.placement.lazy ? at::empty(shape, p.options())
                                           : p.narrow(0, first, local).clone();
    p.set_(mine);
  };
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l) {
    DecoderLayer layer = model.layer(l);
    if (!layer->moe) continue;
    ExpertsImpl& ex = *layer->moe->experts;
    GLINT_ASSERT(ex.num_local() == E && ex.first_expert == 0, "experts of layer ", l, " are sharded already");
    GLINT_ASSERT(!ex.gate_up_adapter && !ex.down_adapter, "shard experts before attaching LoRA");
    for (PackedExpert t : {PackedExpert::kGateUp, PackedExpert::kDown, PackedExpert::kGateUpBias, PackedExpert::kDownBias})
      if (ex.packed(t).defined()) keep(ex.packed(t));
    ex.first_expert = first;
    layer->moe->dispatcher = std::make_shared<AllToAllTokenDispatcher>(ep_comm, E);
  }
}

AllToAllTokenDispatcher::AllToAllTokenDispatcher(std::shared_ptr<Comm> ep_comm, int64_t num_experts)
    : comm_(std::move(ep_comm)), num_experts_(num_experts) {
  GLINT_ASSERT(num_experts_ % comm_->size() == 0);
}

TokenDispatcher::Dispatched AllToAllTokenDispatcher::dispatch(const at::Tensor& x, const Routing& r) {
  const int64_t ep = comm_->size(), local = num_experts_ / ep;
  at::Tensor counts;                                                // [E] copies per global expert
  Dispatched d = sort_by_expert(x, r, num_experts_, &counts);
  // The count exchange, where the counts are (the device, over NCCL): row j of `sent`
  // goes to EP rank j (the counts of its experts); row i of `got` is what rank i sends
  // to each of this rank's experts; then the layer's one wait for the device: both
  // tables come to the host together.
  at::Tensor sent = counts.view({ep, local});                         // [ep, E_local]
  at::Tensor got = comm_->all_to_all(sent, std::vector<int64_t>(ep, 1), std::vector<int64_t>(ep, 1));
  at::Tensor host = at::cat({sent.reshape({-1}), got.reshape({-1})}).to(at::kCPU);  // [2E]
  const int64_t* c = host.data_ptr<int64_t>();
  d.counts.assign(c, c + num_experts_);
  const int64_t* g = c + num_experts_;
  d.send_splits.assign(ep, 0);
  d.recv_splits.assign(ep, 0);
  std::vector<int64_t> local_counts(local, 0);
  for (int64_t j = 0; j < ep; ++j)
    for (int64_t e = 0; e < local; ++e) {
      d.send_splits[j] += d.counts[j * local + e];
      d.recv_splits[j] += g[j * local + e];
      local_counts[e] += g[j * local + e];
    }
  at::Tensor received = all_to_all_differentiable(comm_, d.tokens, d.send_splits, d.recv_splits);
  // Received rows come by source rank, then expert; group them by expert, then source rank.
  const int64_t n = received.size(0);
  std::vector<int64_t> block_start(ep * local);  // received row where block (source i, expert e) starts
  for (int64_t b = 0, row = 0; b < ep * local; ++b) {
    block_start[b] = row;
    row += g[b];
  }
  at::Tensor perm = at::empty({n}, at::kLong);  // grouped row -> received row
  int64_t* p = perm.data_ptr<int64_t>();
  for (int64_t e = 0, k = 0; e < local; ++e)
    for (int64_t i = 0; i < ep; ++i)
      for (int64_t t = 0; t < g[i * local + e]; ++t) p[k++] = block_start[i * local + e] + t;
  at::Tensor inverse = at::empty({n}, at::kLong);
  inverse.index_put_({perm}, at::arange(n, at::kLong));
  d.grouped_from_received = perm.to(x.device());
  d.received_from_grouped = inverse.to(x.device());
  d.tokens = gather_rows(received, d.grouped_from_received, d.received_from_grouped.view({-1, 1}));  // [N_local, H]
  if (d.tags.defined())  // the tags travel with their tokens
    d.tags = comm_->all_to_all(d.tags, d.send_splits, d.recv_splits).index_select(0, d.grouped_from_received);
  d.counts = std::move(local_counts);
  return d;
}

at::Tensor AllToAllTokenDispatcher::combine(const at::Tensor& expert_out, const Dispatched& d,
                                            int64_t num_tokens) {
  at::Tensor by_source =
      gather_rows(expert_out, d.received_from_grouped, d.grouped_from_received.view({-1, 1}));  // received order
  at::Tensor back = all_to_all_differentiable(comm_, by_source, d.recv_splits, d.send_splits);  // [N, H]
  return weighted_combine(back, d, num_tokens);
}

}  // namespace glint
