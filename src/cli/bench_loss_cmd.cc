// glint bench loss: the output head's cross-entropy over a large vocabulary, forward and
// backward, chunked (model/chunked_loss.h) at several chunk sizes against the plain
// [tokens, V] log-softmax; one JSON object.
//
// Legend: N tokens, H hidden, V vocab.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <vector>

#include "cli/commands.h"
#include "core/compat.h"
#include "core/cpu_threads.h"
#include "core/error.h"
#include "model/chunked_loss.h"

namespace glint::cli {

namespace {

struct BenchLossOptions {
  int64_t vocab = 151936, hidden = 256, tokens = 2048, repeats = 3, threads = 0;
  bool head_grad = false;  // the head trains too (--full)
  std::vector<int64_t> chunk_elements = {int64_t(1) << 22, int64_t(1) << 23, int64_t(1) << 24, int64_t(1) << 25};
};

// Seconds of the fastest of `repeats` forward + backward passes of `loss`.
template <typename F>
double best_seconds(int64_t repeats, F&& loss) {
  double best = 1e300;
  for (int64_t r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    loss();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

int run_bench_loss(const BenchLossOptions& o) {
  compat::set_cpu_threads(cpu_threads_for(int(o.threads), 1));
  at::manual_seed(0);
  at::Tensor h = (at::randn({o.tokens, o.hidden}) * 0.5).requires_grad_(true);  // [N,H]
  at::Tensor w = (at::randn({o.vocab, o.hidden}) * 0.02).requires_grad_(o.head_grad);  // [V,H]
  at::Tensor t = at::randint(0, o.vocab, {o.tokens}, at::kLong);
  const double scale = 1.0 / double(o.tokens);
  nlohmann::json variants = nlohmann::json::array();
  double plain_loss = 0;
  auto run = [&](int64_t chunk) {  // chunk 0: plain
    return best_seconds(o.repeats, [&] {
      h.mutable_grad() = at::Tensor();
      if (o.head_grad) w.mutable_grad() = at::Tensor();
      at::Tensor loss = chunk > 0 ? chunked_cross_entropy(h, w, t, chunk).sum() * scale
                                  : at::nll_loss(at::log_softmax(at::matmul(h, w.t()), 1), t) ;
      loss.backward();
      if (chunk == 0) plain_loss = loss.item<double>();
    });
  };
  const double plain = run(0);
  const double gemm_flops = 2.0 * double(o.tokens) * double(o.hidden) * double(o.vocab);
  variants.push_back({{"variant", "plain"}, {"seconds", plain},
                      {"logits_mb", double(o.tokens) * double(o.vocab) * 4 / (1 << 20)}});
  for (int64_t c : o.chunk_elements) {
    double sec = run(c);
    // Check the value against the plain loss (same inputs).
    double chunked = chunked_cross_entropy(h.detach(), w.detach(), t, c).mean().item<double>();
    variants.push_back({{"variant", "chunked"}, {"chunk_elements", c},
                        {"seconds", sec}, {"speedup_vs_plain", plain / sec},
                        {"chunk_buffer_mb", double(c) * 4 / (1 << 20)},
                        {"loss_rel_diff", std::abs(chunked - plain_loss) / plain_loss}});
  }
  nlohmann::json out = {{"bench", "loss"},      {"vocab", o.vocab},       {"hidden", o.hidden},
                        {"tokens", o.tokens},   {"head_grad", o.head_grad}, {"threads", at::get_num_threads()},
                        {"gemm_gflop_per_pass", gemm_flops / 1e9}, {"variants", variants}};
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace

CLI::App* add_bench_loss(CLI::App& bench, Action* action) {
  CLI::App* cmd = bench.add_subcommand(
      "loss", "output-head cross-entropy, forward + backward: chunked at several sizes vs plain log-softmax");
  auto o = std::make_shared<BenchLossOptions>();
  cmd->add_option("--vocab", o->vocab, "vocabulary size V")->capture_default_str();
  cmd->add_option("--hidden", o->hidden, "hidden size H")->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "label tokens N")->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "timed passes each; the fastest is reported")->capture_default_str();
  cmd->add_option("--threads", o->threads, "intra-op threads (0: OMP_NUM_THREADS if set, else all cores)")->capture_default_str();
  cmd->add_option("--chunk-elements", o->chunk_elements, "logit elements per chunk, one variant each")
      ->delimiter(',');
  cmd->add_flag("--head-grad", o->head_grad, "the head requires grad too (full fine-tuning)");
  *action = [o]() { return run_bench_loss(*o); };
  return cmd;
}

}  // namespace glint::cli
