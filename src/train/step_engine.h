// The step core: one forward -> loss -> backward -> reduce -> clip -> AdamW path for
// every kind of training. What trains is a list of learners: a single-adapter run (or a
// --full run) has one, a --tenant run one per tenant, the service one per tenant it holds.
// A learner trains the rows its slot tags (Batch::row_tags; a run with one learner
// leaves them unset), is normalised by its own label tokens, clipped by its own norm and
// updated by its own AdamW on its own schedule; one learner is a one-tenant bank.
//
// Data parallel over the ranks of the world communicator: each rank computes its share of
// the rows, gradients are summed over the ranks holding copies (Placement), norms are
// mesh-aware. Every call is collective unless it says otherwise.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/sample.h"
#include "lora/lora.h"
#include "train/optimizer.h"

namespace glint {

class CausalLMImpl;
class Comm;
class FsdpRunner;
class TenantBank;
struct LossParts;

// Where a trainable tensor lives: the group whose ranks hold identical copies, over
// which its gradient is summed (null: a unique shard, reduced already).
struct Placement {
  Comm* replicas = nullptr;
  int copies = 1;  // ranks holding an identical copy
};

// One set of tensors trained together by one optimizer.
struct Learner {
  std::string name;               // "" for the run's own adapter or parameters; a tenant's name
  int64_t slot = 0;               // the rows it trains (Batch::row_tags)
  std::vector<at::Tensor> params;  // an adapter's tensors (A then B per site), or parameters
  std::vector<std::string> names;  // their logical names (Hugging Face / PEFT)
  std::vector<Placement> placement;
  std::vector<bool> expert;        // sliced by expert parallelism ([E_local, ...])
  LoraOptions lora;                // an adapter's options (unused for parameters)
  std::unique_ptr<AdamW> optimizer;  // null: an adapter only sampled from
  LrSchedule schedule;             // a run's learners; the service sends each update's lr
  int64_t step = 0;                // its optimizer steps so far

  // The state of the run's data for this learner (a training run's; empty in the service).
  std::vector<Sample> samples, eval_samples;
  std::unique_ptr<class EpochSampler> sampler;
  int64_t batch_size = 0;  // its sequences per step, over all ranks
  int64_t steps = 0;       // its optimizer steps in all

  Learner();
  ~Learner();
};

// The parallel layout the engine computes under (src/parallel/parallelize.h builds it).
struct StepParallel {
  std::shared_ptr<Comm> world;
  std::shared_ptr<Comm> ep;               // this rank's EP group (null without EP)
  std::shared_ptr<Comm> expert_replicas;  // the ranks holding the same experts (world without EP)
  std::shared_ptr<FsdpRunner> fsdp;       // null without FSDP
};

// What the forward and backward of one step's micro-batches gave on this rank.
struct MicroBatchPass {
  at::Tensor ce;                // [slots] float64 on the CPU: label-token CE sums per slot
  double aux_loss = 0;          // sum over micro-batches of the load-balancing loss
  bool has_aux = false;
  at::Tensor expert_tokens;     // [L_moe, E] routed copies per expert (undefined: dense)
  double forward_seconds = 0, backward_seconds = 0;
};

class StepEngine {
 public:
  StepEngine(CausalLMImpl& model, StepParallel parallel, TenantBank* bank);
  ~StepEngine();

  // The one registration of trainable tensors: `named` as named_parameters() gives them,
  // `expert[i]` whether tensor i is sliced by expert parallelism, with an AdamW when
  // `adam` is set (else the tensors are frozen: an adapter for sampling). Not collective.
  Learner& add(std::string name, int64_t slot, const std::vector<std::pair<std::string, at::Tensor>>& named,
               const std::vector<bool>& expert, const AdamWOptions* adam);
  // Trainable tensors that are already shards (FSDP's flat shards of a --full run).
  Learner& add_shards(std::vector<at::Tensor> shards, const AdamWOptions& adam);
  void remove(const std::string& name);
  Learner* find(const std::string& name);
  const std::vector<std::unique_ptr<Learner>>& learners() const { return learners_; }
  // Every learner's tensors, in learner order.
  std::vector<at::Tensor> all_params() const;

  // What a step's micro-batches hold, summed over the world.
  struct Counts {
    std::vector<double> label_tokens;  // [slots]: rows without tags count for slot 0
    int64_t tokens = 0;                // non-padding tokens
    double micro_batches = 0;
  };
  Counts count_tokens(const std::vector<Batch>& micro_batches, int64_t slots);

  // The micro-batch's objective from its loss parts (parts.token_ce [B, S-1] and the
  // router's), or undefined for nothing to differentiate.
  using Objective = std::function<at::Tensor(size_t index, const Batch& batch, const LossParts& parts)>;
  // Forward of every micro-batch (the tenant bank routed by its row tags), its objective,
  // and with `backward` its backward: gradients accumulate in the learners' tensors.
  // `router_stats`: the load-balancing loss and routed copies per expert too.
  MicroBatchPass forward_backward(const std::vector<Batch>& micro_batches, int64_t slots,
                                  const Objective& objective, bool backward, bool router_stats);
  // The training objective of a step: each row's CE over its slot's label tokens of the
  // whole step (`label_tokens`, over all ranks), plus the load-balancing loss weighted by
  // `aux_coef / total_micro_batches`.
  static Objective training_objective(const std::vector<double>& label_tokens, double aux_coef,
                                      double total_micro_batches);

  // Sums the gradients of `learners` over the ranks holding copies, one flat buffer per
  // (replica group, dtype) in the order of each bucket's first tensor; undefined
  // gradients become zeros first.
  void reduce(const std::vector<Learner*>& learners);
  // The mesh-aware norm of a learner's gradients (Σg² of each divided by its copies,
  // summed over the world); scaled to max_norm when above (0: no clipping).
  double clip(Learner& learner, double max_norm);
  // One AdamW update at `lr`; counts the learner's step. Not collective.
  void update(Learner& learner, double lr);
  void zero_grad(Learner& learner);

  // Expert tensors hold this EP rank's experts: all_gather over ep -> every expert.
  at::Tensor all_experts(const at::Tensor& local);
  const StepParallel& parallel() const { return parallel_; }
  // Where a tensor of this mesh lives: replicated on every rank, or (expert) on the ranks
  // holding the same experts.
  Placement placement(bool expert) const;

 private:
  CausalLMImpl& model_;
  StepParallel parallel_;
  TenantBank* bank_;
  std::vector<std::unique_ptr<Learner>> learners_;
};

}  // namespace glint
