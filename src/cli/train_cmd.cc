// glint train: LoRA or full fine-tuning; flags or a TOML file (--config) set the options.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "dist/comm.h"
#include "model/adaptable.h"
#include "train/run_checkpoint.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace glint::cli {

// Registers the TrainOptions flags on `cmd`; shared by train and bench.
void add_train_flags(CLI::App* cmd, TrainOptions* o, std::string* targets) {
  cmd->add_option("--model", o->model.dir, "Hugging Face model directory (default: built-in tiny Qwen3-MoE)");
  cmd->add_option("--data", o->data.path,
                  "JSONL of {\"messages\"} chats, {\"prompt\",\"completion\"}, {\"text\"} or pre-tokenized "
                  "{\"input_ids\"} (default: built-in reverse-digits task)");
  cmd->add_option("--tokenizer", o->data.tokenizer, "tokenizer directory for text data (default: --model)");
  cmd->add_option("--max-bad-lines", o->data.max_bad_lines, "skip and count up to N malformed data lines")
      ->capture_default_str();
  cmd->add_option("--enable-thinking", o->data.enable_thinking,
                  "chat template variable enable_thinking: true or false (default: the template's)");
  cmd->add_option("--chat-date", o->data.chat_date,
                  "YYYY-MM-DD: the date chat templates render (strftime_now, e.g. gpt-oss's \"Current date\"); "
                  "default: the day the run starts, recorded in OUT/config.toml so that --resume renders the same");
  cmd->add_option("--output", o->run.output,
                  "run directory (default: a new one under runs/); an existing non-empty one is refused");
  cmd->add_option("--steps", o->optim.steps,
                  "optimizer steps (default: 3 epochs of --data, 1000 steps of the built-in task; 0: from --epochs)");
  cmd->add_option("--epochs", o->optim.epochs,
                  "passes over the training data, when --steps is not given (default 3); each tenant's own data "
                  "for --tenant")->capture_default_str();
  cmd->add_option("--batch-size", o->optim.batch_size, "sequences per optimizer step")->capture_default_str();
  cmd->add_option("--micro-batch-size", o->memory.micro_batch_size,
                  "sequences per forward/backward on one rank (0: the most that fit --memory-budget)")
      ->capture_default_str();
  cmd->add_option("--memory-budget", o->memory.budget,
                  "peak memory per rank for choosing the micro-batch, e.g. 24G or 1500M (default: 90% of the "
                  "memory available at start, shared by the node's ranks)");
  cmd->add_flag("--ignore-memory-estimate", o->memory.ignore_estimate,
                "start even when the estimated peak memory per rank exceeds --memory-budget (refused otherwise)");
  cmd->add_option("--seq-len", o->data.seq_len,
                  "longest row in tokens; longer samples are cut and reported (0: the longest sample, rounded up "
                  "to 8, capped by max_position_embeddings)")->capture_default_str();
  cmd->add_flag("--pack,!--no-pack", o->data.pack, "pack several samples into each sequence");
  cmd->add_option("--lr,--learning-rate", o->optim.lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--min-lr-ratio", o->optim.min_lr_ratio, "final lr as a fraction of --lr")->capture_default_str();
  cmd->add_option("--warmup-steps", o->optim.warmup_steps, "linear warmup steps (-1: 5% of --steps)")->capture_default_str();
  cmd->add_option("--weight-decay", o->optim.adam.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  cmd->add_option("--max-grad-norm", o->optim.max_grad_norm, "global-norm clipping (0: off)")->capture_default_str();
  cmd->add_option("--router-aux-loss-coef", o->optim.router_aux_loss_coef,
                  "weight of the router load-balancing loss added to training (0: off; default: the model's "
                  "config.json, output_router_logits and router_aux_loss_coef)");
  cmd->add_option("--router-bias-update-rate", o->optim.router_bias_update_rate,
                  "aux-loss-free balancing (DeepSeek-V3, DeepSeek-V4): after each step, move each router correction bias by "
                  "this much toward balanced expert load (0: off); the biases are saved with the run")
      ->capture_default_str();
  cmd->add_option("--adam-beta1", o->optim.adam.beta1, "AdamW first-moment decay")->capture_default_str();
  cmd->add_option("--adam-beta2", o->optim.adam.beta2, "AdamW second-moment decay")->capture_default_str();
  cmd->add_option("--adam-eps", o->optim.adam.eps, "AdamW epsilon added to the root of the second moment")->capture_default_str();
  cmd->add_flag("--full,!--lora", o->full, "train all parameters instead of a LoRA adapter");
  cmd->add_flag("--activation-checkpointing,!--no-activation-checkpointing", o->parallel.recompute,
                "recompute each decoder layer in backward (less memory, ~1/3 more compute)");
  cmd->add_flag("--fsdp,!--no-fsdp", o->parallel.fsdp,
                "shard decoder layers over the ranks (ZeRO-3); gathered only while a layer runs");
  cmd->add_option("--fsdp-overlap", o->parallel.fsdp_overlap,
                  "with --fsdp: all-gather the next layer and reduce-scatter gradients while layers compute "
                  "(one more layer held whole): auto (on a GPU), on, off")
      ->capture_default_str();
  cmd->add_option("--ep", o->parallel.ep,
                  "expert parallelism: shard each MoE layer's experts over N ranks (N divides the "
                  "world size; ep_fsdp = W / N replicas, sharded too with --fsdp)")->capture_default_str();
  cmd->add_option("--ep-layout", o->parallel.ep_layout,
                  "contiguous: EP groups are consecutive ranks (all-to-all inside a node); strided")
      ->capture_default_str();
  cmd->add_option("--lora-r", o->lora.r, "LoRA rank")->capture_default_str();
  cmd->add_option("--lora-alpha", o->lora.alpha, "LoRA alpha (scale alpha/r)")->capture_default_str();
  cmd->add_flag("--lora-rslora,!--no-lora-rslora", o->lora.use_rslora, "scale alpha/sqrt(r)");
  cmd->add_option("--lora-dropout", o->lora.dropout,
                  "dropout on the adapters' input during training (linear targets; PEFT cannot load expert "
                  "adapters with dropout)")->capture_default_str();
  cmd->add_option("--lora-targets", *targets,
                  "comma list of the model family's linear module names (q_proj, ..., see README), " +
                      expert_target("gate_up_proj") + ", " + expert_target("down_proj") +
                      "; all-linear (every linear), or all (every linear and expert tensor)")
      ->capture_default_str();
  cmd->add_option_function<std::string>(
      "--lora-exclude",
      [o](const std::string& list) { LoraOptions::parse_excludes(list, "--lora-exclude", &o->lora); },
      "comma list of linear module names to leave out of the targets (PEFT exclude_modules)");
  cmd->add_option("--seed", o->seed, "random seed")->capture_default_str();
  cmd->add_option("--dtype", o->model.dtype, "auto (bfloat16 on a GPU, float32 on the CPU), float32, bfloat16 or float64; "
                                       "bfloat16 keeps float32 master copies of what trains")->capture_default_str();
  cmd->add_option("--device", o->model.device, "auto (cuda:LOCAL_RANK when a GPU is present, else cpu), cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--threads", o->model.threads, "intra-op threads (0: OMP_NUM_THREADS if set, else the cores shared among the node's ranks)")->capture_default_str();
  cmd->add_option("--log-every", o->run.log_every, "readable line every N steps")->capture_default_str();
  cmd->add_option("--eval-every", o->run.eval_every,
                  "evaluate every N steps and at the end (0: at the end only): --eval-data's loss, tenants' eval=, "
                  "the built-in task's exact match")->capture_default_str();
  cmd->add_option("--eval-samples", o->data.eval_samples, "built-in task: held-out samples")->capture_default_str();
  cmd->add_option("--eval-data", o->data.eval_path,
                  "validation JSONL (any form --data takes): its label-token mean loss over all ranks is logged as "
                  "eval_loss");
  cmd->add_option("--eval-batches", o->data.eval_batches,
                  "batches of --batch-size sequences per evaluation (0: the whole --eval-data)")->capture_default_str();
  cmd->add_option("--init-adapter", o->init_adapter,
                  "start from this PEFT adapter directory (glint's or PEFT's): its rank, alpha and targets replace "
                  "--lora-*");
  cmd->add_option("--save-every", o->run.save_every,
                  "write a checkpoint to OUT/checkpoints/step-N every N steps and at the end (0: none); a stop "
                  "signal (SIGTERM, SIGINT) always writes one")->capture_default_str();
  cmd->add_option("--stop-after", o->run.stop_after,
                  "after step N, save a checkpoint and exit 0 as a stop signal does (a job in a time-limited "
                  "slot; --resume continues it)")->capture_default_str();
  cmd->add_option_function<std::string>(
         "--keep-last",
         [o](const std::string& v) {
           if (v == "all") {
             o->run.keep_last = 0;
             return;
           }
           char* end = nullptr;
           const long long n = std::strtoll(v.c_str(), &end, 10);
           GLINT_USAGE_CHECK(!v.empty() && *end == '\0' && n >= 1, "--keep-last ", v,
                             ": expected a number of checkpoints >= 1, or all (a run keeps at least its newest "
                             "checkpoint, which --resume continues from)");
           o->run.keep_last = n;
         },
         "checkpoints to keep: the newest N, or all")
      ->default_str("all");
  cmd->add_flag("--profile", o->run.profile,
               "profile the steps after the first by phase, model region and operator: a summary at the end "
               "and OUT/profile.json");
  cmd->add_option("--dump-gradients", o->run.dump_gradients,
                  "write every step's reduced gradients to DIR/step_<k>.safetensors (for checks)");
}

namespace {

bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) || std::filesystem::path(a).lexically_normal() ==
                                                      std::filesystem::path(b).lexically_normal();
}

// Resuming from a checkpoint older than the run's newest would write over the newer ones.
std::string later_checkpoints_problem(const CheckpointDir& ckpt) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(ckpt.run_dir + "/checkpoints", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    char* end = nullptr;
    long long step = std::strtoll(name.c_str() + 5, &end, 10);
    if (end && *end == '\0' && step > ckpt.step())
      return "--resume " + ckpt.dir + ": " + ckpt.run_dir + " holds a later checkpoint (" + name +
             ") that continuing there would overwrite; give --output NEWDIR to branch from step " +
             std::to_string(ckpt.step()) + ", or resume from " + ckpt.run_dir + " (its latest)";
  }
  return "";
}

// Today in the local time zone, YYYY-MM-DD (the zone strftime_now() renders in).
std::string local_date_today() {
  const std::time_t now = std::time(nullptr);
  std::tm t{};
  localtime_r(&now, &t);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &t);
  return buf;
}

}  // namespace

std::vector<std::string> with_resumed_config(const std::vector<std::string>& args) {
  std::string resume;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" || args[i].rfind("--config=", 0) == 0) return args;  // the user's own
    if (args[i] == "--resume" && i + 1 < args.size()) resume = args[i + 1];
    if (args[i].rfind("--resume=", 0) == 0) resume = args[i].substr(9);
  }
  if (resume.empty()) return args;
  const std::string config = find_checkpoint(resume).run_dir + "/config.toml";
  if (!path_exists(config)) return args;
  std::vector<std::string> out = {"--config", config};
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

Action add_train(CLI::App& app) {
  auto opts = std::make_shared<TrainOptions>();
  auto targets = std::make_shared<std::string>("all");
  CLI::App* cmd = add_command(app, "train");
  // A flag given twice (config file, then command line) takes the last value.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // Expanded before parsing by expand_config_file; declared here for --help.
  cmd->add_option("--config", "TOML file with the same options (flag names without --)")
      ->configurable(false);
  add_train_flags(cmd, opts.get(), targets.get());
  cmd->add_option("--resume", opts->run.resume,
                  "continue a run from its latest checkpoint (a run directory) or from a checkpoint directory: with "
                  "the run's config.toml unless --config is given (flags still override), into the same run "
                  "directory unless --output names a new one; another mesh (-n, --ep, --fsdp) is fine");
  auto overwrite = std::make_shared<bool>(false);
  cmd->add_flag("--overwrite", *overwrite, "write into --output even when it holds an earlier run's files");
  auto tenants = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--tenant", *tenants,
                  "multi-tenant LoRA, repeatable: name=a,r=8,alpha=16,data=a.jsonl[,targets=q_proj+v_proj]"
                  "[,lr=..][,steps=..][,batch=..][,warmup=..][,seed=..][,rslora=1]; each trains on its own data "
                  "in shared micro-batches and is saved to OUT/<name>/adapter")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return [cmd, opts, targets, tenants, overwrite]() {
    LoraOptions::parse_targets(*targets, "--lora-targets", &opts->lora);
    for (const std::string& spec : *tenants) opts->tenants.push_back(TenantSpec::parse(spec, *opts));
    // Defaults that depend on the job, for flags the user left alone. The values are
    // recorded as if given, so OUT/config.toml repeats this run.
    auto preset = [&](const char* flag, auto* field, auto value) {
      if (cmd->count(flag) != 0) return;
      *field = value;
      CLI::Option* opt = cmd->get_option(flag);
      opt->clear();
      std::ostringstream os;
      os << value;
      opt->add_result(os.str());
    };
    const bool builtin = opts->data.path.empty() && opts->tenants.empty();
    GLINT_USAGE_CHECK(!builtin || opts->optim.epochs == 0,
                      "--epochs counts passes over --data; the built-in task is generated without end: give --steps");
    if (opts->model.dir.empty() && builtin) {
      // The built-in job: the tiny model learns the task in ~1000 steps at a high LoRA
      // learning rate.
      preset("--steps", &opts->optim.steps, int64_t(1000));
      preset("--lr", &opts->optim.lr, 3e-3);
      preset("--eval-every", &opts->run.eval_every, int64_t(100));
      preset("--log-every", &opts->run.log_every, int64_t(100));
    } else if (!builtin && cmd->count("--steps") == 0) {
      // The user's data: a length in passes over it (--epochs, 3 unless given), counted
      // once the data is read. (1000 steps of 32 would be 160 epochs of 200 lines.)
      preset("--steps", &opts->optim.steps, int64_t(0));
      if (cmd->count("--epochs") == 0) preset("--epochs", &opts->optim.epochs, 3.0);
    }
    // Text data renders strftime_now() at one date, recorded: a resumed or repeated run
    // tokenizes its data as this one did.
    if (!builtin) preset("--chat-date", &opts->data.chat_date, local_date_today());
    opts->validate();  // flags first: nothing is read before they make sense
    const World world = World::from_env();
    if (world.world_size % opts->parallel.ep != 0) {
      std::string hint;
      if (!opts->run.resume.empty()) {
        // The resumed run's mesh came with its config.toml; another one is fine.
        hint = "; a checkpoint continues on any mesh: give --ep 1" +
               (world.world_size > 1 ? " (or another divisor of " + std::to_string(world.world_size) + ")"
                                     : std::string()) +
               ", or start the ranks as the run did: " +
               resume_command(find_checkpoint(opts->run.resume), opts->run.resume);
      }
      usage_fail("--ep (", opts->parallel.ep, ") must divide the number of ranks (", world.world_size, ")", hint);
    }
    auto comm = Comm::create(world, resolve_device(opts->model.device, world.local_rank, "--device"));
    const bool lead = comm->rank() == 0;
    // Rank 0 picks the run directory (by default a new one under runs/) and checks that it
    // may write there; every rank learns both, so a refusal ends them all before any work.
    std::string problem;
    if (lead) {
      if (!opts->run.resume.empty()) {
        // The run goes on in its own directory, or branches into a new one (--output).
        CheckpointDir ckpt = find_checkpoint(opts->run.resume);
        if (opts->run.output.empty() || same_directory(opts->run.output, ckpt.run_dir)) {
          opts->run.output = ckpt.run_dir;
          problem = later_checkpoints_problem(ckpt);
        } else {
          problem = run_dir_problem(opts->run.output, *overwrite);
        }
      } else {
        if (opts->run.output.empty()) opts->run.output = new_run_dir();
        problem = run_dir_problem(opts->run.output, *overwrite);
      }
    }
    opts->run.output = comm->broadcast_text(opts->run.output, 0);
    problem = comm->broadcast_text(problem, 0);
    opts->data.chat_date = comm->broadcast_text(opts->data.chat_date, 0);  // one day for every rank, even at midnight
    GLINT_USAGE_CHECK(problem.empty(), problem);
    if (lead) std::cerr << "glint train: " << (opts->model.dir.empty() ? "built-in tiny Qwen3-MoE" : opts->model.dir)
              << ", "
              << (!opts->tenants.empty() ? std::to_string(opts->tenants.size()) + " LoRA tenants"
                  : (opts->data.path.empty() ? "built-in reverse-digits task" : opts->data.path) + ", " +
                        (opts->full ? "full fine-tuning" : "LoRA r=" + std::to_string(opts->lora.r)))
              << (comm->size() > 1 ? ", " + std::to_string(comm->size()) + " ranks" : std::string())
              << " -> " << opts->run.output << "\n";
    auto train = [&](Trainer& trainer) {
    if (lead) {
      make_dirs(opts->run.output);
      // The resolved configuration, re-usable as --config. The output directory is a
      // comment: a repeat gets a directory of its own.
      std::string config = cmd->config_to_str(true, false), kept;
      std::istringstream lines(config);
      for (std::string line; std::getline(lines, line);)
        // Where a run went and how one invocation ended are not settings to repeat.
        if (line.rfind("output=", 0) != 0 && line.rfind("overwrite=", 0) != 0 && line.rfind("resume=", 0) != 0 &&
            line.rfind("stop-after=", 0) != 0)
          kept += line + "\n";
      write_text_atomic(opts->run.output + "/config.toml",
                        "# glint train, written to " + opts->run.output + " (--config repeats it into a new directory)\n" +
                            kept);
    }
    trainer.run();
    if (trainer.stopped()) return 0;  // the trainer said where its checkpoint is and how to resume
    std::string saved = opts->full ? opts->run.output + "/model" : opts->run.output + "/adapter";
    if (!opts->tenants.empty()) saved = opts->run.output + "/<tenant>/adapter for " + std::to_string(opts->tenants.size()) + " tenants";
    if (lead) std::cerr << "saved " << saved
              << "; metrics in " << opts->run.output << "/metrics.jsonl\n";
    return 0;
    };
    // A new run that fails before its first step leaves nothing behind, so that the same
    // command can run again: the directory is removed when this run made it, emptied when
    // it found it empty or holding only what a run writes before its first step.
    const bool existed = path_exists(opts->run.output);
    const bool fresh = opts->run.resume.empty() && (!existed || run_dir_unstarted(opts->run.output));
    std::unique_ptr<Trainer> made;
    try {
      made = std::make_unique<Trainer>(*opts, comm);
      return train(*made);
    } catch (...) {
      if (lead && fresh && (!made || made->current_step() == 0)) remove_unstarted_run(opts->run.output, existed);
      throw;
    }
  };
}

}  // namespace glint::cli
