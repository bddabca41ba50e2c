// A training job: the model laid over the ranks (parallel/parallelize.h), its learners in
// the step core (train/step_engine.h), the data each learner draws from, its evaluations,
// run checkpoints and outputs. The run loop (train/run_loop.h) drives it step by step;
// glint serve drives it call by call (service mode).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "data/collate.h"
#include "data/sample.h"
#include "data/sampler.h"
#include "lora/lora.h"
#include "lora/tenants.h"
#include "model/causal_lm.h"
#include "train/memory_estimate.h"
#include "train/optimizer.h"
#include "train/step_engine.h"
#include "train/train_options.h"

namespace glint {

// One sequence of a service forward: a tenant's tokens and the targets each position
// predicts (Tinker's Datum after the client's shift).
struct ServiceRow {
  int64_t slot = -1;             // the tenant's bank slot
  std::vector<int64_t> tokens;   // N >= 1 token ids
  std::vector<int64_t> targets;  // N: position i predicts targets[i]
  // The row's objective from the log-probabilities of its targets, lp [N] (float64 for a
  // float64 model, else float32; differentiable). Unset: forward only.
  std::function<at::Tensor(const at::Tensor& lp)> objective;
};

struct ServiceForward {
  std::vector<std::vector<double>> logprobs;  // per row: its N target log-probabilities
  std::vector<double> objective;              // per row: its objective's value (0 without)
};

// One optimizer update of a service tenant (Tinker's AdamParams).
struct ServiceStep {
  double lr = 1e-4;
  AdamWOptions adam;         // betas, eps, decoupled weight decay
  double max_grad_norm = 0;  // 0: no clipping
};

// What one optimizer step did.
struct StepStats {
  double loss = 0;         // mean label-token cross-entropy (before the update)
  double aux_loss = -1;    // load-balancing loss (mean over micro-batches); < 0 if unused
  double grad_norm = 0;    // before clipping
  int64_t idle_experts = -1;   // (MoE layer, expert) pairs that got no token in the step
  double expert_load_max = 0;  // busiest expert's tokens / the mean per expert (1 = even)
  double lr = 0;
  int64_t tokens = 0;      // non-padding tokens
  int64_t label_tokens = 0;
  double seconds = 0;          // whole step
  double forward_seconds = 0;  // loss computation, all micro-batches
  double backward_seconds = 0;
  double optimizer_seconds = 0;  // clipping + AdamW
  // Multi-tenant training: one entry per tenant that trained in this step.
  struct Tenant {
    std::string name;
    int64_t step = 0;  // the tenant's own step counter after this step
    double loss = 0, grad_norm = 0, lr = 0;
    int64_t label_tokens = 0;
  };
  std::vector<Tenant> tenants;
};

class Comm;
struct TextTokenizer;

// Data parallel over the ranks of `comm`: each rank takes its contiguous share of every
// global batch, the label-token count and the gradients are summed over ranks, so a
// W-rank step equals a 1-rank step on the same global batch. Only rank 0 writes files.
class Trainer {
 public:
  explicit Trainer(TrainOptions options, std::shared_ptr<Comm> comm = nullptr);
  ~Trainer();

  // Runs the remaining steps in a RunLoop (train/run_loop.h): OUT/metrics.jsonl, the
  // report, evaluations, checkpoints, the graceful stop; OUT/config.toml is the CLI's.
  void run();
  // Whether run() ended early on a signal (its checkpoint: last_checkpoint()).
  bool stopped() const { return stopped_; }
  const std::string& last_checkpoint() const { return last_checkpoint_; }
  // The step the run starts after: 0, or the resumed checkpoint's.
  int64_t start_step() const { return start_step_; }
  // The last step finished (start_step() until the first step of this process ends).
  int64_t current_step() const { return step_; }
  // Collective: writes OUT/checkpoints/step-<current step>/ (train/run_checkpoint.h).
  void save_checkpoint_now();
  // Validation loss (label-token mean over all ranks) of `samples`, or of tenant `slot`'s
  // eval set; at most opt.data.eval_batches batches. Collective.
  double evaluate_loss(const std::vector<Sample>& samples, int64_t batch_size, int64_t slot, int64_t* label_tokens);
  // What rank 0 reports before step 1: the data, the sequence length and what it cut,
  // epochs, the mesh, the memory estimate. One line each.
  const std::vector<std::string>& setup_report() const { return report_; }
  // Whether the data is the built-in task (then exact-match evaluations are possible).
  bool builtin_task() const { return builtin_task_; }
  // Whether every forward is collective (sharded layers or experts): then every rank
  // takes part in evaluations.
  bool forwards_are_collective() const;
  // The learners of a training run: the run's own adapter (or parameters), or its tenants.
  const std::vector<std::unique_ptr<Learner>>& learners() const { return engine_->learners(); }
  // A tenant run's learners (none in a run of one adapter).
  std::vector<Learner*> tenant_learners() const;
  // Collective: writes the run's outputs (the adapter, each tenant's, or the model).
  void save_outputs();
  // Rank 0 writes OUT/base-model when the base is the built-in random model (once).
  void save_random_base();
  // Sequences per micro-batch on this rank (chosen from the memory budget when
  // --micro-batch-size is 0) and the sequence length in use.
  int64_t micro_batch_size() const { return micro_batch_size_; }
  int64_t seq_len() const { return data_->collate.seq_len; }
  // The memory estimate (train/memory_estimate.h) of this rank's step of `micro_batches`
  // micro-batches of `rows` sequences of `seq_len` tokens, with the data this run holds.
  MemoryEstimate estimate_step_memory(int64_t rows, int64_t seq_len, int64_t micro_batches);
  // And of decoding the batch `in` with the model as this rank holds it (its weights those
  // of a step: adapters' moments included, FSDP's shards).
  DecodeEstimate estimate_decoding_memory(const DecodeInputs& in);
  // One optimizer step on the given micro-batches (sum of label tokens normalizes).
  StepStats step(const std::vector<Batch>& micro_batches);
  // Exact-match accuracy of greedy completions on held-out built-in task samples.
  double evaluate_exact_match(int64_t count, uint64_t seed);

  // Service mode (TrainOptions::service.slots > 0; src/train/tenant_service.cc). Every
  // call is collective: each rank makes it with the same arguments, in the same order.
  // Adds a tenant with a fresh adapter (TenantOptions::seed); `trainable`: with an
  // optimizer, else only for sampling. Throws glint::Error (no free slot, duplicate, bad
  // rank or target) before anything changes.
  void add_service_tenant(const TenantOptions& tenant, bool trainable);
  void remove_service_tenant(const std::string& name);
  TenantBank& tenant_bank() { return *bank_; }
  // Forward (and backward with each row's objective) of rows of any tenants: each rank
  // computes its contiguous share; gradients accumulate in the tenants' tensors (summed
  // over ranks at service_optim_step). Every rank gets every row's log-probabilities.
  ServiceForward service_forward(const std::vector<ServiceRow>& rows, bool backward);
  // Applies and clears the gradients accumulated for tenant `name`; returns their norm
  // before clipping. Its optimizer state is kept between calls.
  double service_optim_step(const std::string& name, const ServiceStep& step);
  int64_t service_steps_taken(const std::string& name) const;
  // A tenant's whole state (adapter, and with `optimizer` its AdamW moments, masters and
  // step count) into directory `dir`: rank files written by the ranks that own pieces,
  // state.json last by rank 0. load_service_state reads it back on any mesh, the
  // optimizer too when `optimizer` (else its moments restart from zero). With
  // `gradients` (a tenant paged out and back in on the same mesh) each rank's
  // accumulated gradients go along, so the tenant's next update is the one it would have
  // taken had it stayed.
  void save_service_state(const std::string& name, const std::string& dir, bool optimizer, bool gradients = false);
  void load_service_state(const std::string& name, const std::string& dir, bool optimizer, bool gradients = false);
  // A tenant's adapter as a PEFT directory (rank 0 writes), and a PEFT adapter read into a
  // tenant of the same LoRA options.
  void save_service_adapter(const std::string& name, const std::string& dir, const std::string& base_model);
  void load_service_adapter(const std::string& name, const std::string& dir);
  // generate() over the served model; every rank runs the same requests.
  std::vector<struct GenerationResult> service_generate(const std::vector<struct GenerationRequest>& requests);

  CausalLMImpl& model() { return *model_; }
  LoraModel& lora() { return lora_; }
  const TrainOptions& options() const { return opt_; }
  // Every learner's tensors, in learner order (a tenant run's: each tenant's in turn).
  std::vector<at::Tensor> trainable_parameters() const { return engine_->all_params(); }
  // Bytes of model weights this rank holds between steps: unsharded parameters, this
  // rank's FSDP shards, adapters, and optimizer moments.
  int64_t local_weight_bytes() const;
  // This rank's micro-batches of the next optimizer step.
  std::vector<Batch> next_micro_batches();
  Comm& comm() { return *comm_; }
  // Bytes this rank has sent over all of its communicators (world and mesh groups).
  uint64_t bytes_sent() const;

 private:
  // Reads `path` whole (pre-tokenized, or text tokenized as in data/text_dataset.h); sets
  // the padding id for text data. Samples are cut to the sequence length later.
  std::vector<Sample> read_data(const std::string& path, int64_t vocab, int64_t* pad_id);
  // Reads every data file and validation file ("" for none: an empty set), chooses the
  // sequence length from all of them (so that nothing is cut unless --seq-len asks) and
  // cuts to it, reporting each. Returns one sample set per training file (the run's, or
  // each tenant's); *evals gets one per eval_paths entry.
  std::vector<std::vector<Sample>> load_data(const std::vector<std::string>& paths,
                                             const std::vector<std::string>& eval_paths, int64_t vocab,
                                             std::vector<std::vector<Sample>>* evals);
  // "data.jsonl: one epoch = 59 samples, 23,456 tokens (4,321 trained); 1000 steps x 32
  // = 542.4 epochs" for a sample set trained `steps` x `batch`.
  std::string epoch_line(const std::string& what, const std::vector<Sample>& samples, int64_t steps, int64_t batch);
  // The steps of opt_.optim.epochs passes over `samples` in batches of `batch` (at least 1).
  int64_t steps_for_epochs(size_t samples, int64_t batch) const;
  // Chooses the micro-batch size (when not set) and reports the memory estimate.
  void plan_memory();
  std::unique_ptr<TextTokenizer> text_tokenizer_;  // loaded by the first text file
  // Checkpoints (src/train/trainer_checkpoint.cc): every piece of the trained state this
  // rank holds, what the run trains, and the resume that puts them back.
  std::vector<struct StatePiece> state_pieces();
  nlohmann::json identity() const;
  void resume(const std::string& path);
  bool stopped_ = false;
  std::string last_checkpoint_;
  int64_t start_step_ = 0;
  // Multi-tenant training (src/train/tenant_training.cc).
  void setup_tenants(std::vector<std::vector<Sample>> data, std::vector<std::vector<Sample>> eval);
  // base_model: adapter_config.json's base_model_name_or_path ("" = the run's model).
  void save_lora(LoraModel& lora, const std::string& dir, const std::string& base_model = "");
  // The adapter's base_model_name_or_path: --model, "glint/random-<type>" for a config
  // without weights, or OUT/base-model for the built-in task's random base.
  std::string base_model_name() const;
  Learner& service_tenant(const std::string& name) const;  // throws when absent
  std::unique_ptr<TenantBank> bank_;
  void save_full_model();
  // The pieces of a learner's tensors `params` (its own, or like-shaped ones to read into)
  // and their state (src/train/trainer_checkpoint.cc), logical names prefixed with
  // `prefix`; `optimizer`: its AdamW state too.
  void add_state_pieces(std::vector<struct StatePiece>& pieces, const Learner& learner,
                        const std::vector<at::Tensor>& params, AdamW* opt, const std::string& prefix);
  // After tenants come or go: the layers' grad inputs (recompute, FSDP) are every
  // tenant's tensors again.
  void refresh_adapter_inputs();
  // Collective: writes DIR/step_<k>.safetensors on rank 0 with the learner's gradients
  // after reduction, before clipping: expert tensors gathered over the EP group, FSDP's
  // shards gathered into full tensors.
  void dump_gradients(const Learner& learner, const std::string& dir, int64_t step);
  // This rank's EP group (null without expert parallelism).
  Comm* ep_comm() const { return engine_->parallel().ep.get(); }
  // The FSDP runner of the layout (null without FSDP).
  class FsdpRunner* fsdp_runner() const;
  TrainOptions opt_;
  std::shared_ptr<Comm> comm_;
  std::unique_ptr<struct ParallelLayout> layout_;  // the mesh and groups (parallel/parallelize.h)
  CausalLM model_{nullptr};
  LoraModel lora_;
  std::unique_ptr<StepEngine> engine_;
  struct DataState {
    CollateOptions collate;
  };
  std::unique_ptr<DataState> data_;
  int64_t step_ = 0;
  int64_t micro_batch_size_ = 0;  // resolved: options' or chosen by plan_memory
  bool builtin_task_ = false;
  std::vector<std::string> report_;  // what rank 0 reports before step 1, a line each
};

}  // namespace glint
