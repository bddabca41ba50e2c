// glint bench: benchmark programs that print one JSON object.
//
// bench ep: EP x FSDP against FSDP alone on the same ranks and global batch.
//
// bench train: LoRA (or full) training steps on a documented MoE bench model, with the
// achieved GFLOP/s counted from the model shape next to a sgemm rate measured in the
// same process on the same threads.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <filesystem>
#include <random>
#include <sstream>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/op_profile.h"
#include "dist/comm.h"
#include "io/model_files.h"
#include "model/block_attention.h"
#include "model/flops.h"
#include "train/metrics.h"
#include "train/trainer.h"

namespace glint::cli {

void add_train_flags(CLI::App* cmd, TrainOptions* o, std::string* targets);

namespace {

// The bench model: Qwen3-MoE shape, ~0.25 B parameters, 16 experts, top-2.
ModelConfig bench_model_config() {
  ModelConfig c;
  c.model_type = "qwen3_moe";
  c.vocab_size = 8192;
  c.hidden_size = 1024;
  c.intermediate_size = 2048;
  c.moe_intermediate_size = 512;
  c.num_hidden_layers = 8;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.num_experts = 16;
  c.num_experts_per_tok = 2;
  c.max_position_embeddings = 4096;
  c.validate("bench model");
  return c;
}

double lora_flops_per_token(const LoraModel& lora, const ModelConfig& c) {
  double r = lora.options.r, f = 0;
  for (const auto& s : lora.sites) {
    if (s.linear) f += r * (s.linear->A.size(1) + s.linear->B.size(0));
    else f += c.num_experts_per_tok * r * (s.experts->A.size(2) + s.experts->B.size(1));
  }
  return 2.0 * f;
}

double sgemm_gflops(int64_t n, int reps) {
  at::Tensor a = at::randn({n, n}), b = at::randn({n, n});
  at::mm(a, b);  // warm up
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) at::mm(a, b);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * n * n * n * reps / s / 1e9;
}

int run_bench_train(TrainOptions opt, int64_t warmup, const std::string& targets, const std::string& attention) {
  LoraOptions::parse_targets(targets, "--lora-targets", &opt.lora);
  if (opt.model.dir.empty()) opt.model.config = bench_model_config();
  opt.data.path.clear();
  opt.data.eval_samples = 0;
  Trainer trainer(opt);
  const ModelConfig& c = trainer.model().config;
  int64_t S = opt.data.seq_len > 0 ? opt.data.seq_len : 512, B = opt.optim.batch_size;
  int64_t mbs = opt.memory.micro_batch_size > 0 ? opt.memory.micro_batch_size : B;
  std::vector<Batch> batches = random_batches(c.vocab_size, B, S, mbs, opt.seed);
  for (int64_t i = 0; i < warmup; ++i) trainer.step(batches);
  StepStats total;
  // --profile: the timed steps, in a second pass so that the timings above stay unprofiled.
  profile::Profiler profiler;
  for (int64_t i = 0; i < opt.optim.steps; ++i) {
    StepStats st = trainer.step(batches);
    total.seconds += st.seconds;
    total.forward_seconds += st.forward_seconds;
    total.backward_seconds += st.backward_seconds;
    total.optimizer_seconds += st.optimizer_seconds;
    total.tokens += st.tokens;
  }
  if (opt.run.profile)
    for (int64_t i = 0; i < opt.optim.steps; ++i) {
      profiler.start();
      trainer.step(batches);
      profiler.stop();
      profiler.note_step();
    }
  double n = double(opt.optim.steps);
  // Counted on an unwritten copy of the model: the trained one may be sharded (FSDP).
  CausalLM shapes(c, TensorPlacement{at::kFloat, c10::Device(c10::kCPU), /*lazy=*/true});
  double fwd = forward_flops(*shapes, B, S);
  // Backward: gradients w.r.t. activations cost one forward; weight gradients cost one
  // forward more for full training, and only the adapters' share for LoRA.
  double lora_fwd = opt.full ? 0 : lora_flops_per_token(trainer.lora(), c) * B * S;
  double step_flops = opt.full ? 3.0 * fwd : 2.0 * fwd + 3.0 * lora_fwd;
  int64_t params = 0, trainable = 0;
  for (const auto& p : trainer.model().parameters()) params += p.numel();
  for (const auto& p : trainer.trainable_parameters()) trainable += p.numel();
  double step_s = total.seconds / n;
  double achieved = step_flops / step_s / 1e9;
  double sgemm = sgemm_gflops(2048, 10);
  nlohmann::json out = {
      {"bench", "train"},
      {"mode", opt.full ? "full" : "lora"},
      {"model", {{"params", params}, {"trainable_params", trainable}, {"layers", c.num_hidden_layers},
                 {"hidden", c.hidden_size}, {"experts", c.num_experts}, {"top_k", c.num_experts_per_tok},
                 {"moe_intermediate", c.moe_intermediate_size}, {"vocab", c.vocab_size}}},
      {"batch_size", B}, {"micro_batch_size", mbs}, {"seq_len", S},
      {"threads", at::get_num_threads()}, {"dtype", dtype_name(trainer.model().placement.dtype)},
      {"attention", attention},
      {"device", trainer.model().placement.device.str()},
      {"steps_timed", opt.optim.steps},
      {"step_s", step_s},
      {"tokens_per_s", double(total.tokens) / total.seconds},
      {"phase_s", {{"forward", total.forward_seconds / n}, {"backward", total.backward_seconds / n},
                   {"optimizer", total.optimizer_seconds / n}}},
      {"step_gflop", step_flops / 1e9},
      {"achieved_gflops", achieved},
      {"sgemm_gflops", sgemm},
      {"fraction_of_sgemm", achieved / sgemm},
      {"peak_rss_mb", peak_rss_mb()},
  };
  if (opt.run.profile) {
    out["profile"] = profiler.report(25);
    std::cerr << profiler.text(15);
  }
  std::cout << out.dump() << std::endl;
  return 0;
}

// Peak RSS of every rank after loading and after one training step, gathered to rank 0,
// which prints the JSON object.
int run_bench_load(TrainOptions opt) {
  auto comm = Comm::create(World::from_env());
  double before = peak_rss_mb();
  uint64_t model_bytes = 0;
  {
    CheckpointReader ckpt(opt.model.dir);
    for (const auto& k : ckpt.keys()) {
      const TensorInfo& ti = ckpt.info(k);
      model_bytes += ti.end - ti.begin;
    }
  }
  opt.data.path.clear();
  opt.data.eval_samples = 0;
  auto t0 = std::chrono::steady_clock::now();
  Trainer trainer(opt, comm);
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double after_load = peak_rss_mb();
  trainer.step(trainer.next_micro_batches());
  double after_step = peak_rss_mb();
  at::Tensor mine = at::tensor({before, after_load, after_step, load_s,
                                double(trainer.local_weight_bytes()) / (1 << 20)}, at::kDouble)
                        .view({1, 5});
  at::Tensor all = comm->gather(mine, 0);
  if (comm->rank() != 0) return 0;
  nlohmann::json ranks = nlohmann::json::array();
  double max_load = 0, max_step = 0;
  for (int r = 0; r < comm->size(); ++r) {
    auto row = all[r];
    ranks.push_back({{"rank", r}, {"rss_before_load_mb", row[0].item<double>()},
                     {"peak_rss_load_mb", row[1].item<double>()}, {"peak_rss_step_mb", row[2].item<double>()},
                     {"load_s", row[3].item<double>()}, {"weights_mb", row[4].item<double>()}});
    max_load = std::max(max_load, row[1].item<double>());
    max_step = std::max(max_step, row[2].item<double>());
  }
  nlohmann::json out = {{"bench", "load"},
                        {"ranks", comm->size()},
                        {"fsdp", opt.parallel.fsdp},
                        {"ep", opt.parallel.ep},
                        {"mode", opt.full ? "full" : "lora"},
                        {"dtype", dtype_name(trainer.model().placement.dtype)},
                        {"model_mb", double(model_bytes) / (1 << 20)},
                        {"model_mb_per_rank", double(model_bytes) / (1 << 20) / comm->size()},
                        {"max_peak_rss_load_mb", max_load},
                        {"max_peak_rss_step_mb", max_step},
                        {"per_rank", ranks}};
  std::cout << out.dump() << std::endl;
  return 0;
}

// One variant of `bench ep` on this rank (started under `glint launch`): FSDP over all
// ranks, with the experts either FSDP-sharded too (ep = 1) or expert-parallel. Rank 0
// prints one JSON object with every rank's figures.
int run_bench_ep_rank(TrainOptions opt, int64_t warmup) {
  auto comm = Comm::create(World::from_env());
  opt.data.path.clear();
  opt.data.eval_samples = 0;
  opt.parallel.fsdp = true;
  Trainer trainer(opt, comm);
  const int W = comm->size();
  int64_t S = opt.data.seq_len, share = opt.optim.batch_size / W;
  int64_t mbs = opt.memory.micro_batch_size > 0 ? opt.memory.micro_batch_size : share;
  // Each rank its own random share of the global batch.
  std::vector<Batch> batches = random_batches(trainer.model().config.vocab_size, share, S, mbs,
                                              opt.seed + 7919 * comm->rank());
  for (int64_t i = 0; i < warmup; ++i) trainer.step(batches);
  uint64_t bytes0 = trainer.bytes_sent();
  double seconds = 0;
  int64_t tokens = 0;
  for (int64_t i = 0; i < opt.optim.steps; ++i) {
    StepStats st = trainer.step(batches);
    seconds += st.seconds;
    tokens += st.tokens;
  }
  double bytes_per_step = double(trainer.bytes_sent() - bytes0) / double(opt.optim.steps);
  at::Tensor mine = at::tensor({peak_rss_mb(), bytes_per_step / (1 << 20),
                                double(trainer.local_weight_bytes()) / (1 << 20), seconds},
                               at::kDouble).view({1, 4});
  at::Tensor all = comm->gather(mine, 0);
  if (comm->rank() != 0) return 0;
  nlohmann::json ranks = nlohmann::json::array();
  double max_rss = 0, max_mb = 0, sum_mb = 0, max_s = 0;
  for (int r = 0; r < W; ++r) {
    auto row = all[r];
    ranks.push_back({{"rank", r}, {"peak_rss_mb", row[0].item<double>()},
                     {"sent_mb_per_step", row[1].item<double>()}, {"weights_mb", row[2].item<double>()}});
    max_rss = std::max(max_rss, row[0].item<double>());
    max_mb = std::max(max_mb, row[1].item<double>());
    sum_mb += row[1].item<double>();
    max_s = std::max(max_s, row[3].item<double>());
  }
  nlohmann::json out = {{"bench", "ep-rank"},
                        {"ep", opt.parallel.ep},
                        {"ranks", W},
                        {"step_s", max_s / double(opt.optim.steps)},
                        {"tokens_per_s", double(tokens) / max_s},
                        {"max_peak_rss_mb", max_rss},
                        {"max_sent_mb_per_step", max_mb},
                        {"mean_sent_mb_per_step", sum_mb / W},
                        {"per_rank", ranks}};
  std::cout << out.dump() << std::endl;
  return 0;
}

// EP x FSDP against FSDP alone on the same model, ranks and global batch: each variant
// runs as its own `glint launch` job (so peak memory is each variant's own), and the
// ratios compare them.
int run_bench_ep(const TrainOptions& opt, int64_t ranks, int64_t warmup) {
  GLINT_CHECK(!opt.model.dir.empty(), "bench ep: --model is required");
  GLINT_CHECK(opt.parallel.ep > 1, "bench ep: --ep must be > 1 (the expert-parallel variant), got ", opt.parallel.ep);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  auto variant = [&](int64_t ep) {
    std::ostringstream cmd;
    cmd << self << " launch -n " << ranks << " -- " << self << " bench ep-rank --model " << opt.model.dir
        << " --ep " << ep << " --steps " << opt.optim.steps << " --warmup " << warmup << " --batch-size "
        << opt.optim.batch_size << " --seq-len " << opt.data.seq_len << " --micro-batch-size " << opt.memory.micro_batch_size
        << " --threads " << opt.model.threads << " --seed " << opt.seed << (opt.full ? " --full" : "");
    std::string out = run_or_fail(cmd.str(), "bench ep");
    size_t at = out.find("{\"bench\":\"ep-rank\"");
    GLINT_CHECK(at != std::string::npos, "bench ep: no result in the output of\n  ", cmd.str(), "\n", out);
    return nlohmann::json::parse(out.substr(at, out.find('\n', at) - at));
  };
  nlohmann::json fsdp = variant(1), ep = variant(opt.parallel.ep);
  auto ratio = [&](const char* key) { return ep[key].get<double>() / fsdp[key].get<double>(); };
  nlohmann::json out = {{"bench", "ep"},
                        {"model", opt.model.dir},
                        {"mode", opt.full ? "full" : "lora"},
                        {"ranks", ranks},
                        {"ep", opt.parallel.ep},
                        {"ep_fsdp", ranks / opt.parallel.ep},
                        {"batch_size", opt.optim.batch_size},
                        {"seq_len", opt.data.seq_len},
                        {"fsdp", fsdp},
                        {"ep_x_fsdp", ep},
                        {"ratio_ep_over_fsdp",
                         {{"tokens_per_s", ratio("tokens_per_s")},
                          {"max_sent_mb_per_step", ratio("max_sent_mb_per_step")},
                          {"max_peak_rss_mb", ratio("max_peak_rss_mb")}}}};
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace

std::vector<Batch> random_batches(int64_t vocab, int64_t rows, int64_t S, int64_t mbs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> tok(0, vocab - 1);
  std::vector<Batch> batches;
  for (int64_t r0 = 0; r0 < rows; r0 += mbs) {
    Batch b;
    b.input_ids = at::empty({mbs, S}, at::kLong);
    auto acc = b.input_ids.accessor<int64_t, 2>();
    for (int64_t i = 0; i < mbs; ++i)
      for (int64_t j = 0; j < S; ++j) acc[i][j] = tok(rng);
    b.labels = b.input_ids.clone();
    b.position_ids = at::arange(S, at::kLong).unsqueeze(0).repeat({mbs, 1});
    b.segment_ids = at::zeros({mbs, S}, at::kLong);
    b.label_tokens = mbs * (S - 1);
    batches.push_back(b);
  }
  return batches;
}

std::string run_or_fail(const std::string& cmd, const std::string& what) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  GLINT_CHECK(p, what, ": cannot start: ", cmd);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = pclose(p);
  GLINT_CHECK(status == 0, what, ": this command failed:\n  ", cmd, "\n", out);
  return out;
}

Action add_bench(CLI::App& app) {
  CLI::App* cmd = add_command(app, "bench");
  cmd->require_subcommand(1);
  auto opt = std::make_shared<TrainOptions>();
  opt->optim.steps = 3;
  opt->optim.batch_size = 4;
  opt->data.seq_len = 512;
  opt->optim.lr = 1e-4;
  auto targets = std::make_shared<std::string>("all");
  auto warmup = std::make_shared<int64_t>(1);
  CLI::App* train = cmd->add_subcommand("train", "training step speed on the bench model (~0.25B MoE)");
  add_train_flags(train, opt.get(), targets.get());
  train->add_option("--warmup", *warmup, "untimed steps first")->capture_default_str();
  auto attention = std::make_shared<std::string>("block");
  train->add_option("--attention", *attention,
                    "block: attention in blocks of queries (glint's kernel where no fused one runs); eager: "
                    "each sequence's whole [S, S] scores, for comparison")
      ->check(CLI::IsMember({"block", "eager"}))
      ->capture_default_str();
  auto load_opt = std::make_shared<TrainOptions>();
  load_opt->parallel.fsdp = true;
  load_opt->optim.batch_size = 4;
  load_opt->data.seq_len = 16;
  CLI::App* load = cmd->add_subcommand(
      "load", "peak memory per rank while loading a checkpoint and in one training step");
  load->add_option("--model", load_opt->model.dir, "Hugging Face model directory")->required();
  load->add_flag("--fsdp,!--no-fsdp", load_opt->parallel.fsdp, "shard the layers (default) or replicate them")
      ->capture_default_str();
  load->add_flag("--full", load_opt->full, "full fine-tuning instead of LoRA");
  load->add_option("--ep", load_opt->parallel.ep, "expert parallelism over N ranks")->capture_default_str();
  load->add_option("--batch-size", load_opt->optim.batch_size, "sequences in the training step")->capture_default_str();
  load->add_option("--threads", load_opt->model.threads, "intra-op threads per rank (0: OMP_NUM_THREADS if set, else the cores shared among the node's ranks)")->capture_default_str();
  load->add_option("--dtype", load_opt->model.dtype, "weights and compute: auto, float32, bfloat16")->capture_default_str();
  // bench ep: the orchestrator, and the per-rank program it launches.
  auto ep_opt = std::make_shared<TrainOptions>();
  ep_opt->full = true;
  ep_opt->parallel.ep = 4;
  ep_opt->optim.steps = 3;
  ep_opt->optim.batch_size = 8;
  ep_opt->data.seq_len = 256;
  ep_opt->model.threads = 1;
  auto ep_ranks = std::make_shared<int64_t>(4);
  auto ep_warmup = std::make_shared<int64_t>(1);
  CLI::App* ep = cmd->add_subcommand(
      "ep", "EP x FSDP vs FSDP alone: tokens/s, bytes sent and peak memory per rank, as ratios");
  CLI::App* ep_rank = cmd->add_subcommand("ep-rank", "one variant of bench ep (run under glint launch)");
  ep_rank->group("");  // internal
  for (CLI::App* c : {ep, ep_rank}) {
    c->add_option("--model", ep_opt->model.dir, "Hugging Face model directory (an MoE model)")->required();
    c->add_option("--ep", ep_opt->parallel.ep, "expert-parallel degree of the EP variant")->capture_default_str();
    c->add_option("--steps", ep_opt->optim.steps, "timed steps")->capture_default_str();
    c->add_option("--warmup", *ep_warmup, "untimed steps first")->capture_default_str();
    c->add_option("--batch-size", ep_opt->optim.batch_size, "global sequences per step")->capture_default_str();
    c->add_option("--micro-batch-size", ep_opt->memory.micro_batch_size, "sequences per forward/backward (0: the whole batch)")->capture_default_str();
    c->add_option("--seq-len", ep_opt->data.seq_len, "tokens per sequence")->capture_default_str();
    c->add_option("--threads", ep_opt->model.threads, "intra-op threads per rank")->capture_default_str();
    c->add_option("--seed", ep_opt->seed, "random seed")->capture_default_str();
    c->add_flag("--full,!--lora", ep_opt->full, "full fine-tuning (default) or LoRA");
  }
  ep->add_option("--ranks", *ep_ranks, "processes per variant")->capture_default_str();
  Action tenants_action;
  CLI::App* tenants = add_bench_tenants(*cmd, &tenants_action);
  CLI::App* tenants_run = cmd->get_subcommand("tenants-run");
  Action tokenize_action;
  CLI::App* tokenize = add_bench_tokenize(*cmd, &tokenize_action);
  Action loss_action;
  CLI::App* loss = add_bench_loss(*cmd, &loss_action);
  Action decode_action;
  CLI::App* decode = add_bench_decode(*cmd, &decode_action);
  return [train, opt, targets, warmup, load, load_opt, tokenize, tokenize_action, ep, ep_rank, ep_opt,
          ep_ranks, ep_warmup, tenants, tenants_run, tenants_action, loss, loss_action, decode, decode_action,
          attention]() {
    if (loss->parsed()) return loss_action();
    if (decode->parsed()) return decode_action();
    if (tenants->parsed() || tenants_run->parsed()) return tenants_action();
    if (train->parsed()) {
      set_eager_attention(*attention == "eager");
      return run_bench_train(*opt, *warmup, *targets, *attention);
    }
    if (ep->parsed()) return run_bench_ep(*ep_opt, *ep_ranks, *ep_warmup);
    if (ep_rank->parsed()) return run_bench_ep_rank(*ep_opt, *ep_warmup);
    if (load->parsed()) return run_bench_load(*load_opt);
    if (tokenize->parsed()) return tokenize_action();
    return 2;
  };
}

}  // namespace glint::cli
