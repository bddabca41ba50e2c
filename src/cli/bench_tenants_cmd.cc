// glint bench tenants: multi-tenant LoRA training with 1, 2, 4 and 8 tenants, mixed in
// the same micro-batches against the same tenants trained one after another (one tenant
// per step), on one shared base model. Each configuration runs in its own process (so
// its peak RSS is its own); the orchestrator prints one JSON object with the ratios.
// Throughput is the best timed round of each configuration (the machines are noisy).
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/fs.h"
#include "data/collate.h"
#include "train/metrics.h"
#include "train/trainer.h"

namespace glint::cli {

namespace {

struct BenchTenantsOptions {
  std::vector<int64_t> counts = {1, 2, 4, 8};  // tenant counts (orchestrator)
  int64_t tenants = 1;                         // this configuration (tenants-run)
  std::string mode = "mixed";                  // mixed | sequential
  int64_t seq_len = 256, rows = 1, r = 16, steps = 6, warmup = 2, threads = 0;
};

// The model: Qwen3-MoE shape, 4 layers, hidden 512, 16 experts of width 256, top-2.
ModelConfig bench_tenants_model() {
  ModelConfig c = tiny_moe_config(4096);
  c.hidden_size = 512;
  c.intermediate_size = 1024;
  c.moe_intermediate_size = 256;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.num_experts = 16;
  c.num_experts_per_tok = 2;
  c.mlp_only_layers.clear();
  c.max_position_embeddings = 4096;
  c.validate("bench tenants model");
  return c;
}

// One configuration: T tenants of rank r on one base; `mixed` steps hold every tenant's
// rows, `sequential` steps one tenant's each (T steps per round).
int run_configuration(const BenchTenantsOptions& o) {
  GLINT_CHECK(o.mode == "mixed" || o.mode == "sequential", "--mode must be mixed or sequential, got '", o.mode, "'");
  GLINT_CHECK(o.tenants >= 1, "--tenants must be >= 1");
  ModelConfig c = bench_tenants_model();
  std::string dir = (std::filesystem::temp_directory_path() / ("glint_bench_tenants_" + std::to_string(::getpid()))).string();
  make_dirs(dir);
  TrainOptions opt;
  opt.model.config = c;
  opt.data.seq_len = o.seq_len;
  opt.model.threads = o.threads;
  opt.optim.steps = 1000;
  opt.optim.batch_size = o.rows;
  for (int64_t t = 0; t < o.tenants; ++t) {
    // The trainer reads each tenant's data file; the bench feeds its own batches.
    std::string data = dir + "/t" + std::to_string(t) + ".jsonl";
    write_text_atomic(data, "{\"input_ids\": [1, 2, 3, 4]}\n");
    opt.tenants.push_back(TenantSpec::parse("name=t" + std::to_string(t) + ",r=" + std::to_string(o.r) +
                                                ",seed=" + std::to_string(t) + ",data=" + data,
                                            opt));
  }
  Trainer trainer(opt);
  std::filesystem::remove_all(dir);
  uint64_t seed = 7;
  // `rows` random sequences tagged with tenant slot t.
  auto rows_of = [&](int64_t t) {
    Batch b = random_batches(c.vocab_size, o.rows, o.seq_len, o.rows, seed++)[0];
    b.row_tags = at::full({o.rows}, t, at::kLong);
    return b;
  };
  // One round: every tenant trains once on `rows` sequences.
  auto round = [&]() {
    double seconds = 0;
    int64_t tokens = 0;
    if (o.mode == "mixed") {
      std::vector<Batch> parts;
      for (int64_t t = 0; t < o.tenants; ++t) parts.push_back(rows_of(t));
      StepStats st = trainer.step({concat_rows(parts)});
      seconds += st.seconds;
      tokens += st.tokens;
    } else {
      for (int64_t t = 0; t < o.tenants; ++t) {
        StepStats st = trainer.step({rows_of(t)});
        seconds += st.seconds;
        tokens += st.tokens;
      }
    }
    return std::make_pair(seconds, tokens);
  };
  for (int64_t i = 0; i < o.warmup; ++i) round();
  // The machines are shared and noisy: the best round is reported next to the mean.
  double seconds = 0, best = 0;
  int64_t tokens = 0;
  for (int64_t i = 0; i < o.steps; ++i) {
    auto [s, n] = round();
    seconds += s;
    tokens += n;
    best = std::max(best, double(n) / s);
  }
  nlohmann::json out = {{"bench", "tenants-run"}, {"tenants", o.tenants},     {"mode", o.mode},
                        {"rows_per_tenant", o.rows}, {"seq_len", o.seq_len}, {"r", o.r},
                        {"rounds_timed", o.steps},   {"tokens_per_s", best},
                        {"tokens_per_s_mean", double(tokens) / seconds},
                        {"threads", at::get_num_threads()}, {"peak_rss_mb", peak_rss_mb()}};
  std::cout << out.dump() << std::endl;
  return 0;
}

int run_bench_tenants(const BenchTenantsOptions& o) {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  nlohmann::json configs = nlohmann::json::array();
  std::map<std::pair<int64_t, std::string>, nlohmann::json> result;
  auto run = [&](int64_t tenants, const std::string& mode, int64_t rows) {
    std::ostringstream cmd;
    cmd << self << " bench tenants-run --tenants " << tenants << " --mode " << mode << " --seq-len " << o.seq_len
        << " --rows " << rows << " --r " << o.r << " --steps " << o.steps << " --warmup " << o.warmup
        << " --threads " << o.threads;
    std::string out = run_or_fail(cmd.str(), "bench tenants");
    size_t at = out.find("{\"bench\":\"tenants-run\"");
    GLINT_CHECK(at != std::string::npos, "bench tenants: no result in the output of\n  ", cmd.str(), "\n", out);
    return nlohmann::json::parse(out.substr(at, out.find('\n', at) - at));
  };
  for (int64_t t : o.counts) {
    result[{t, "mixed"}] = run(t, "mixed", o.rows);
    result[{t, "sequential"}] = run(t, "sequential", o.rows);
    // One tenant with the mixed step's whole batch: the cost of mixing alone.
    result[{t, "single"}] = run(1, "mixed", t * o.rows);
  }
  for (int64_t t : o.counts) {
    const auto& m = result[{t, "mixed"}];
    const auto& s = result[{t, "sequential"}];
    const double single = result[{t, "single"}]["tokens_per_s"].get<double>();
    configs.push_back({{"tenants", t},
                       {"mixed_tokens_per_s", m["tokens_per_s"]},
                       {"sequential_tokens_per_s", s["tokens_per_s"]},
                       {"single_tenant_same_batch_tokens_per_s", single},
                       {"mixed_peak_rss_mb", m["peak_rss_mb"]},
                       {"sequential_peak_rss_mb", s["peak_rss_mb"]},
                       {"single_tenant_same_batch_peak_rss_mb", result[{t, "single"}]["peak_rss_mb"]},
                       {"ratio_mixed_over_sequential_tokens_per_s",
                        m["tokens_per_s"].get<double>() / s["tokens_per_s"].get<double>()},
                       {"ratio_mixed_over_single_tenant_same_batch_tokens_per_s",
                        m["tokens_per_s"].get<double>() / single},
                       {"ratio_mixed_over_sequential_peak_rss",
                        m["peak_rss_mb"].get<double>() / s["peak_rss_mb"].get<double>()}});
  }
  nlohmann::json out = {{"bench", "tenants"}, {"rows_per_tenant", o.rows}, {"seq_len", o.seq_len},
                        {"r", o.r},           {"rounds_timed", o.steps},  {"configurations", configs}};
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace

CLI::App* add_bench_tenants(CLI::App& bench, Action* action) {
  auto o = std::make_shared<BenchTenantsOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "tenants", "multi-tenant LoRA: 1-8 tenants in mixed batches vs one tenant per step (tokens/s, peak RSS)");
  CLI::App* run = bench.add_subcommand("tenants-run", "one configuration of bench tenants");
  run->group("");  // internal
  for (CLI::App* c : {cmd, run}) {
    c->add_option("--seq-len", o->seq_len, "tokens per sequence")->capture_default_str();
    c->add_option("--rows", o->rows, "sequences per tenant per step")->capture_default_str();
    c->add_option("--r", o->r, "LoRA rank of every tenant")->capture_default_str();
    c->add_option("--steps", o->steps, "timed rounds (each tenant trains once per round)")->capture_default_str();
    c->add_option("--warmup", o->warmup, "untimed rounds first")->capture_default_str();
    c->add_option("--threads", o->threads, "intra-op threads (0: OMP_NUM_THREADS if set, else all cores)")->capture_default_str();
  }
  cmd->add_option("--counts", o->counts, "tenant counts to compare")->capture_default_str();
  run->add_option("--tenants", o->tenants, "tenants in this configuration")->capture_default_str();
  run->add_option("--mode", o->mode, "mixed or sequential")->capture_default_str();
  *action = [o, cmd, run]() { return cmd->parsed() ? run_bench_tenants(*o) : run_configuration(*o); };
  return cmd;
}

}  // namespace glint::cli
