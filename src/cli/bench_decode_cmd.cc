// glint bench decode: the time per new token of cached decoding (model/decode_cache.h)
// after a prefill of each --history length: one row, random token ids, each step a forward
// of one token and its logits. With --compare, the same again with every attention sublayer
// recomputed over the history (DecodeCache::recompute): the cost of decoding without a
// state, within the same run. One JSON object.
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/compat.h"
#include "core/cpu_threads.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "dist/comm.h"
#include "dist/world.h"
#include "model/causal_lm.h"
#include "model/decode_cache.h"
#include "model/weights.h"
#include "parallel/parallelize.h"
#include "train/memory_estimate.h"

namespace glint::cli {

namespace {

struct BenchDecodeOptions {
  std::string model, dtype = "float32", device = "cpu";
  std::vector<int64_t> history = {64, 512, 2048};
  int64_t tokens = 8, warmup = 1, threads = 0, seed = 0;
  bool compare = false;
};

struct Decoding {
  double seconds_per_token = 0, prefill_seconds = 0;
  int64_t state_bytes = 0;  // what the cache held at the end (DecodeCache::bytes)
};

// Seconds per new token after a prefill of `history` tokens: the mean of o.tokens steps
// after o.warmup untimed ones, and the prefill's seconds.
Decoding time_decoding(CausalLMImpl& m, const BenchDecodeOptions& o, int64_t history, const c10::Device& device,
                       bool recompute = false) {
  at::NoGradGuard no_grad;
  const int64_t vocab = m.config.vocab_size, steps = o.warmup + o.tokens;
  at::Generator gen = at::detail::createCPUGenerator(uint64_t(o.seed + history));
  at::Tensor ids = at::randint(0, vocab, {1, history + steps}, gen, at::kLong);
  DecodeCache cache(1, device, history + steps);
  cache.recompute = recompute;
  auto step = [&](int64_t from, int64_t count) {
    at::Tensor pos = at::arange(from, from + count, at::kLong).view({1, count});
    at::Tensor hidden = m.forward(ids.narrow(1, from, count), pos, at::zeros({1, count}, at::kLong), &cache).hidden;
    return m.logits(hidden.narrow(1, count - 1, 1)).to(at::kCPU);  // what a sampler reads
  };
  auto t0 = std::chrono::steady_clock::now();
  step(0, history);
  const double prefill = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int64_t i = 0; i < o.warmup; ++i) step(history + i, 1);
  t0 = std::chrono::steady_clock::now();
  for (int64_t i = o.warmup; i < steps; ++i) step(history + i, 1);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {total / double(o.tokens), prefill, cache.bytes()};
}

int run_bench_decode(const BenchDecodeOptions& o) {
  GLINT_USAGE_CHECK(o.tokens > 0 && o.warmup >= 0, "--tokens must be positive and --warmup >= 0");
  for (int64_t h : o.history) GLINT_USAGE_CHECK(h > 0, "--history lengths must be positive, got ", h);
  GLINT_CHECK(path_exists(o.model), "--model ", o.model, ": no such directory");
  compat::set_cpu_threads(cpu_threads_for(int(o.threads), 1));
  const c10::Device device = parse_device(o.device, "--device");
  TensorPlacement lazy{parse_dtype(o.dtype, "--dtype"), device};
  lazy.lazy = true;
  CausalLM model(ModelConfig::from_file(o.model + "/config.json"), lazy);
  parallelize(*model, Comm::create(World{}, device), ParallelOptions{}, open_checkpoint(o.model, model->config).get());
  model->eval();

  std::string paths;  // each layer's decoding path
  for (int64_t l = 0; l < model->config.num_hidden_layers; ++l)
    paths += std::string(l ? "," : "") + (model->layer(l)->self_attn->keeps_decode_state() ? "state" : "history");
  nlohmann::json results = nlohmann::json::array();
  for (int64_t h : o.history) {
    nlohmann::json r = {{"history", h}};
    const Decoding d = time_decoding(*model, o, h, device);
    r["ms_per_token"] = d.seconds_per_token * 1e3;
    r["prefill_s"] = d.prefill_seconds;
    // The decoding state of the row, held against the estimate (train/memory_estimate.h).
    const int64_t positions = h + o.warmup + o.tokens;
    r["state_mb"] = double(d.state_bytes) / (1 << 20);
    r["state_estimate_mb"] =
        decode_state_bytes_per_row(*model, positions, int64_t(c10::elementSize(model->placement.dtype))) / (1 << 20);
    if (o.compare) {
      const double recompute = time_decoding(*model, o, h, device, /*recompute=*/true).seconds_per_token;
      r["recompute_ms_per_token"] = recompute * 1e3;
      r["speedup"] = recompute / d.seconds_per_token;
    }
    std::cerr << "history " << h << ": " << r.dump() << std::endl;
    results.push_back(r);
  }
  nlohmann::json out = {{"bench", "decode"},       {"model", o.model},     {"model_type", model->config.model_type},
                        {"dtype", o.dtype},        {"device", o.device},   {"threads", at::get_num_threads()},
                        {"tokens", o.tokens},      {"warmup", o.warmup},   {"layers", paths},
                        {"results", results}};
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace

CLI::App* add_bench_decode(CLI::App& bench, Action* action) {
  CLI::App* cmd = bench.add_subcommand(
      "decode", "cached decoding: time per new token after prefills of several lengths (one row)");
  auto o = std::make_shared<BenchDecodeOptions>();
  cmd->add_option("--model", o->model, "Hugging Face model directory")->required();
  cmd->add_option("--history", o->history, "prefill lengths, one measurement each")->delimiter(',')->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "timed new tokens per history")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "untimed new tokens first")->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "weights and compute: float32, bfloat16, float64")->capture_default_str();
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--threads", o->threads, "intra-op threads (0: OMP_NUM_THREADS if set, else all cores)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of the random token ids")->capture_default_str();
  cmd->add_flag("--compare", o->compare,
                "also time decoding with every attention sublayer recomputed over the history (no decoding state)");
  *action = [o]() { return run_bench_decode(*o); };
  return cmd;
}

}  // namespace glint::cli
