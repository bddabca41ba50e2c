// The sparse MoE block: float32 router (softmax top-k; or sigmoid / sqrt(softplus) scores
// with a selection bias and group-limited top-k; or a fixed table of experts per token
// id), token dispatch, packed experts computed grouped by expert, weighted combine, and
// optional shared experts every token passes.
//
// Legend: T tokens, H hidden, E experts (E_local held here), K top-k, I expert width,
// N = T*K routed token copies (N_local after dispatch).
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "model/adapter.h"
#include "model/config.h"
#include "model/family.h"
#include "model/layers.h"
#include "model/mlp.h"

namespace glint {

// Router decisions for T tokens.
struct Routing {
  at::Tensor logits;   // [T, E] float32, before softmax / sigmoid
  at::Tensor weights;  // [T, K] in the hidden dtype (renormalized when norm_topk_prob, scaled
                       // by routed_scaling_factor)
  at::Tensor experts;  // [T, K] int64 expert ids
  at::Tensor tags;     // [T] int64 token tags (TokenTags), or undefined
};

// Moves routed token copies to the experts that compute them and back.
// The local version sorts assignments by expert; an expert-parallel version exchanges
// tokens between ranks. Both must produce the same combine() result.
class TokenDispatcher {
 public:
  struct Dispatched {
    at::Tensor tokens;            // [N_local, H] grouped by local expert, ascending
    std::vector<int64_t> counts;  // [E_local] tokens per local expert (host)
    at::Tensor token_index;       // [N] source token of each sorted copy
    at::Tensor readers;           // [T, K] where each token's copies sit (token_index's inverse)
    at::Tensor weight;            // [N] routing weight of each sorted copy
    at::Tensor tags;              // [N_local] tag of each grouped row (undefined: no tags)
    // Expert-parallel dispatch: rows per peer each way, and the permutation between the
    // received order (by source rank, then expert) and the grouped order (by expert).
    std::vector<int64_t> send_splits, recv_splits;  // [ep]
    at::Tensor grouped_from_received;  // [N_local] received row of each grouped row
    at::Tensor received_from_grouped;  // [N_local] its inverse
  };
  virtual ~TokenDispatcher() = default;
  // x [T,H], routing for T tokens  ->  tokens grouped by local expert.
  virtual Dispatched dispatch(const at::Tensor& x, const Routing& routing) = 0;
  // expert outputs [N_local, H] in dispatch order  ->  [T, H] weighted sum per token.
  virtual at::Tensor combine(const at::Tensor& expert_out, const Dispatched& d,
                             int64_t num_tokens) = 0;
};

// The dispatch steps every dispatcher shares. sort_by_expert: copies of x [T,H] sorted
// stably by expert id (token order kept inside each expert), and the copies per expert:
// in `counts` on the host (one wait for the device), or, given `device_counts`, only
// in `*device_counts` [E] on x's device (no wait; expert parallelism exchanges them first).
TokenDispatcher::Dispatched sort_by_expert(const at::Tensor& x, const Routing& routing, int64_t num_experts,
                                           at::Tensor* device_counts = nullptr);
// Expert outputs [N,H] in sort_by_expert's order -> [T,H]: each token's weighted sum.
at::Tensor weighted_combine(const at::Tensor& sorted_out, const TokenDispatcher::Dispatched& d,
                            int64_t num_tokens);

// Single-process dispatcher: all E experts are local.
class LocalTokenDispatcher : public TokenDispatcher {
 public:
  explicit LocalTokenDispatcher(int64_t num_experts) : num_experts_(num_experts) {}
  Dispatched dispatch(const at::Tensor& x, const Routing& routing) override;
  at::Tensor combine(const at::Tensor& expert_out, const Dispatched& d,
                     int64_t num_tokens) override;

 private:
  int64_t num_experts_;
};

// How a family's experts hold and use their packed tensors.
struct ExpertForm {
  // Stored input-major, used as x W: gate_up_proj [E, H, 2I], down_proj [E, I, H] (gpt-oss).
  // Else output-major, used as x W^T: gate_up_proj [E, 2I, H], down_proj [E, H, I].
  bool in_major = false;
  // gate_up's outputs alternate gate (2j) and up (2j + 1) (gpt-oss); else gate [0, I), up [I, 2I).
  bool interleaved = false;
  bool biases = false;  // gate_up_proj_bias [E, 2I], down_proj_bias [E, H], added to each output
  Glu glu;              // the activation of gate and up
};

// Packed expert weights: expert e's tensors are the dim-0 slice e, so sharding experts is a
// slice. A packed tensor's "out" and "in" are its projection's, whatever its storage order.
class ExpertsImpl : public torch::nn::Module {
 public:
  ExpertsImpl(int64_t num_local, int64_t hidden, int64_t intermediate,
              const TensorPlacement& place, int64_t first_expert = 0, ExpertForm form = {});
  // x [N, H] grouped by local expert with counts[e] rows each  ->  [N, H]; tags [N] are
  // passed to the adapters (undefined: none).
  at::Tensor forward(const at::Tensor& x, const std::vector<int64_t>& counts,
                     const at::Tensor& tags = at::Tensor());
  int64_t num_local() const { return gate_up_proj.size(0); }
  int64_t hidden() const { return form.in_major ? gate_up_proj.size(1) : gate_up_proj.size(2); }
  int64_t intermediate() const { return form.in_major ? down_proj.size(1) : down_proj.size(2); }
  // The packed tensor t (gate_up_proj, down_proj or a bias), and its projection's sizes.
  at::Tensor& packed(PackedExpert t);
  int64_t in_features(PackedExpert t) const { return t == PackedExpert::kGateUp ? hidden() : intermediate(); }
  int64_t out_features(PackedExpert t) const { return t == PackedExpert::kGateUp ? 2 * intermediate() : hidden(); }
  // Expert weights [E, out, in] of a tensor in this form's storage order (a view), and back.
  at::Tensor out_major(const at::Tensor& w) const { return form.in_major ? w.transpose(1, 2) : w; }
  // x [N, in] grouped by local expert through w [E_local, out, in] (out-major) plus each
  // expert's bias [E_local, out] (undefined: none), with the adapter's update: fused into
  // the GEMMs when it is one low-rank product.
  at::Tensor project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, const ExpertAdapter* adapter,
                     const std::vector<int64_t>& counts, const at::Tensor& tags) const;

  at::Tensor gate_up_proj;       // [E_local, 2I, H], or [E_local, H, 2I] in_major
  at::Tensor down_proj;          // [E_local, H, I], or [E_local, I, H] in_major
  at::Tensor gate_up_proj_bias;  // [E_local, 2I] with form.biases, else undefined
  at::Tensor down_proj_bias;     // [E_local, H] with form.biases, else undefined
  int64_t first_expert;          // global id of local expert 0
  ExpertForm form;
  std::shared_ptr<ExpertAdapter> gate_up_adapter;  // optional LoRA on gate_up_proj
  std::shared_ptr<ExpertAdapter> down_adapter;     // optional LoRA on down_proj
};
TORCH_MODULE(Experts);

// The router ("mlp.gate", gpt-oss "mlp.router"): expert scores of each token and its top-k
// choice. Never adapted.
// A hash router (hash_routing) takes each token's experts from the table tid2eid by token
// id instead of the top-k; its weights still come from the scores.
class RouterImpl : public torch::nn::Module {
 public:
  enum class Scoring { kSoftmax, kSigmoid, kSqrtSoftplus };
  // bias: logits are x W^T + b (gpt-oss), b a parameter [E].
  RouterImpl(const ModelConfig& c, const TensorPlacement& place, bool hash_routing = false, bool bias = false);
  // x [T, H] -> the routing of its tokens; token_ids [T] int64 (read by a hash router only).
  Routing route(const at::Tensor& x, const at::Tensor& token_ids = at::Tensor()) const;
  // The experts route() chooses for router logits [T, E] of tokens token_ids [T]: [T, K]
  // int64, no gradient.
  at::Tensor select(const at::Tensor& logits, const at::Tensor& token_ids = at::Tensor()) const;

  int64_t num_experts, top_k;
  bool norm_topk_prob;
  Scoring scoring;
  int64_t n_group, topk_group;
  double routed_scaling_factor;
  at::Tensor weight;                   // [E, H]
  at::Tensor bias;                     // [E], or undefined
  at::Tensor e_score_correction_bias;  // [E] float32 buffer, added to the scores for the
                                       // choice only; undefined when the family has none
  at::Tensor tid2eid;                  // [V, K] int64 buffer of a hash router, else undefined

 private:
  at::Tensor scores(const at::Tensor& logits) const;  // [T, E]
};
TORCH_MODULE(Router);

// What a family's MoE block differs in beyond its config: the router's kind and module name,
// and its experts' form.
struct MoeForm {
  bool hash_routing = false;         // DeepSeek-V4's hash layers
  std::string router_name = "gate";  // the router's module name under the block
  bool router_bias = false;
  ExpertForm experts;  // its glu.limit defaults to the config's swiglu_limit (see MoeBlockImpl)
};

class MoeBlockImpl : public MlpModule {
 public:
  // The experts' GLU clamp is c.swiglu_limit unless `form` sets one.
  MoeBlockImpl(const ModelConfig& c, const TensorPlacement& place, MoeForm form = {});
  // x [..., H] ([T, H], or [B, S, H] for tenant adapters on a shared expert to find their
  // rows) -> the same shape, for tokens token_ids [T] (read by a hash router only); the
  // routing is returned through *routing when non-null.
  at::Tensor forward(const at::Tensor& x, Routing* routing = nullptr, const at::Tensor& token_ids = at::Tensor());
  // x [B, S, H] -> [B, S, H], appending the router logits [T, E] when non-null.
  at::Tensor forward(const at::Tensor& x, const LayerContext& ctx, std::vector<at::Tensor>* router_logits) override;
  ActivationMemory activation_memory(const ActivationShape& shape) const override;
  Routing route(const at::Tensor& x, const at::Tensor& token_ids = at::Tensor()) const {
    return gate->route(x, token_ids);
  }

  int64_t num_experts, top_k;
  Router gate{nullptr};  // registered as form.router_name
  Experts experts{nullptr};
  DenseMlp shared_experts{nullptr};  // "shared_experts" (n_shared_experts > 0) or "shared_expert"
                                     // (shared_expert_intermediate_size > 0), else absent
  Linear shared_expert_gate{nullptr};  // [1, H]: sigmoid gate on "shared_expert", else absent
  std::shared_ptr<TokenDispatcher> dispatcher;
  std::shared_ptr<const TokenTags> token_tags;  // set from outside; null: no tags
};
TORCH_MODULE(MoeBlock);

// transformers' load-balancing loss over the router logits of all MoE layers, each
// [T, E] for the same T tokens, counting only tokens where valid [T] is true:
// E * sum_k,e (fraction of tokens whose k-th choice is e) * (mean router prob of e).
at::Tensor load_balancing_loss(const std::vector<at::Tensor>& router_logits,
                               const at::Tensor& valid, int64_t num_experts, int64_t top_k);

}  // namespace glint
