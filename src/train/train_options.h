// The options of a training job, by concern: the model and where it computes, the data,
// the optimization, how a rank fits its share of the batch in memory, the parallel
// layout, the run (its directory, logging, evaluation, checkpoints), and what trains
// (LoRA, --full, tenants). glint serve's service mode has its own. No libtorch here:
// train/trainer.h runs them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lora/lora_options.h"
#include "model/config.h"
#include "parallel/parallel_options.h"
#include "train/adamw_options.h"

namespace glint {

struct TrainOptions;

// One tenant of multi-tenant LoRA training: its adapter, data and schedule.
struct TenantSpec {
  TenantOptions adapter;      // name, LoRA options; adapter.seed is set from `seed`
  std::string data;           // its JSONL (any form --data takes)
  std::string eval_data;      // its validation JSONL ("" = none)
  int64_t steps = 0;          // its optimizer steps (0: --steps)
  int64_t batch_size = 0;     // its sequences per step over all ranks (0: --batch-size)
  double lr = 0;              // its peak learning rate (0: --lr)
  int64_t warmup_steps = -1;  // -1: 5% of its steps
  AdamWOptions adam;          // its AdamW betas, eps and weight decay (default: the run's)
  uint64_t seed = 0;          // data order and adapter init, as --seed does alone
  // "name=a,r=8,alpha=16,data=a.jsonl[,eval=b.jsonl][,rslora=1][,targets=q_proj+v_proj]
  // [,lr=..][,steps=..][,batch=..][,warmup=..][,seed=..][,wd=..][,beta1=..][,beta2=..][,eps=..]";
  // unset fields take `defaults`' values.
  // Throws glint::Error naming the spec and the bad field.
  static TenantSpec parse(const std::string& spec, const TrainOptions& defaults);
};

// The base model and where it computes.
struct ModelOptions {
  std::string dir;               // Hugging Face model directory; "" = a random model of
                                 // `config`'s shape (default: built-in tiny Qwen3-MoE)
  std::optional<ModelConfig> config;
  // Base weights and compute: float32, bfloat16 (trainable tensors keep float32 masters
  // and moments), float64; "auto": bfloat16 on a GPU, float32 on the CPU.
  std::string dtype = "auto";
  std::string device = "auto";  // cpu, cuda (cuda:LOCAL_RANK), cuda:N; auto: a GPU if any
  int64_t threads = 0;           // intra-op threads; 0 = all cores
};

// What the run trains and evaluates on.
struct DataOptions {
  std::string path;              // JSONL of chats ({"messages"}), {"prompt","completion"},
                                 // {"text"} or pre-tokenized {"input_ids"}; "" = built-in
                                 // reverse-digits task
  std::string tokenizer;         // tokenizer directory for text data; "" = the model's
  int64_t max_bad_lines = 0;     // malformed data lines to skip (counted) before failing
  std::string enable_thinking;   // chat template variable: "true", "false" or "" (unset)
  std::string chat_date;         // "YYYY-MM-DD": the date chat templates' strftime_now()
                                 // shows; "" = the clock (glint train records the day it
                                 // starts on, so that a resumed run renders the same)
  int64_t seq_len = 0;           // longest row in tokens; longer samples are cut (and
                                 // reported); 0 = the longest sample rounded up to 8,
                                 // capped by max_position_embeddings
  bool pack = false;             // pack several samples per sequence
  std::string eval_path;         // validation JSONL (any form `path` takes): its label-token
                                 // mean loss over all ranks at each evaluation
  int64_t eval_batches = 0;      // batches of --batch-size sequences per evaluation (0 = all)
  int64_t eval_samples = 200;    // built-in task: held-out samples per exact-match eval
};

// The optimization: length, batch, schedule, AdamW, clipping, router balancing.
struct OptimOptions {
  int64_t steps = 1000;          // optimizer steps; 0 = as many as `epochs` passes over
                                 // the training data take (ceil(epochs x samples / batch))
  double epochs = 0;             // with steps 0: passes over the data (glint train's default
                                 // on the user's data: 3)
  int64_t batch_size = 32;       // sequences per optimizer step, over all ranks
  double lr = 2e-4;              // peak learning rate
  double min_lr_ratio = 0.1;     // cosine decays to lr * min_lr_ratio
  int64_t warmup_steps = -1;     // -1 = 5% of steps
  AdamWOptions adam;             // betas, eps, decoupled weight decay
  double max_grad_norm = 1.0;    // 0 disables clipping
  double router_aux_loss_coef = -1;  // load-balancing loss weight (0: off); < 0: as the
                                     // model's config.json (output_router_logits)
  // Aux-loss-free balancing: after each step, every router correction bias moves by this
  // much toward balanced load (up for under-loaded experts, down for over-loaded). 0: off.
  double router_bias_update_rate = 0;
};

// How one rank fits its share of each batch.
struct MemoryOptions {
  int64_t micro_batch_size = 0;  // sequences per forward/backward on one rank; 0 = the
                                 // largest share of the batch whose estimated peak memory
                                 // fits `budget`
  std::string budget;            // per rank, "24G" / "1500M" ("" = 90% of the memory
                                 // available at start, shared by the node's ranks)
  bool ignore_estimate = false;  // start even when the estimated peak memory per rank
                                 // exceeds the budget (else refused)
};

// The run: its directory, logging, evaluations, checkpoints and stopping.
struct RunOptions {
  std::string output;            // run directory ("" = the CLI's default: a new
                                 // directory under runs/; the Trainer needs one to run())
  int64_t log_every = 10;        // readable line every N steps
  int64_t eval_every = 100;      // evaluate every N steps and at the end (0 = end only)
  int64_t save_every = 0;        // checkpoint every N steps and at the end (0 = never)
  int64_t keep_last = 0;         // checkpoints kept (the newest; 0 = all: --keep-last all)
  int64_t stop_after = 0;        // stop after this step as a stop signal does: a checkpoint,
                                 // then exit 0 (a job in a time-limited slot); 0 = never
  std::string resume;            // continue from this checkpoint (a run directory's latest,
                                 // or a checkpoint directory)
  std::string dump_gradients;    // if set: DIR/step_<k>.safetensors with every trainable
                                 // gradient after reduction, before clipping (for checks)
  bool profile = false;          // op-level profile of the steps (core/op_profile.h):
                                 // OUT/profile.json and a summary at the end
};

// Service mode (glint serve): no data and no schedule; room for `slots` LoRA tenants of
// rank up to r_max, added and removed while the model stays loaded (Trainer's service_*
// calls). slots 0: a training run.
struct ServiceModeOptions {
  int64_t slots = 0;
  int64_t r_max = 0;
};

struct TrainOptions {
  ModelOptions model;
  DataOptions data;
  OptimOptions optim;
  MemoryOptions memory;
  ParallelOptions parallel;
  RunOptions run;
  // What trains: one LoRA adapter (`lora`, or `init_adapter`'s), every parameter (`full`),
  // or several tenants' adapters together, each with its own data.
  bool full = false;
  LoraOptions lora;
  std::string init_adapter;      // start LoRA training from this PEFT adapter directory
                                 // (its rank, alpha and targets replace --lora-*)
  std::vector<TenantSpec> tenants;  // empty: one adapter (--lora-*)
  uint64_t seed = 0;             // data order, adapter initialisation, dropout
  ServiceModeOptions service;

  void validate() const;  // throws glint::Error naming the flag
};

}  // namespace glint
