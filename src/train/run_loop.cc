// The run loop of a training job (train/run_loop.h).
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/compat.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/op_profile.h"
#include "core/stop_signal.h"
#include "dist/comm.h"
#include "dist/world.h"
#include "train/metrics.h"
#include "report/report.h"
#include "train/run_loop.h"
#include "train/trainer.h"

namespace glint {

RunLoop::RunLoop(Trainer& job) : job_(job) {}

void RunLoop::run() {
  const TrainOptions& opt = job_.options();
  Comm& comm = job_.comm();
  const int64_t start_step = job_.start_step();
  const bool tenant_run = !job_.tenant_learners().empty();
  // Rank 0 reports and writes; the other ranks train silently beside it.
  const bool lead = comm.rank() == 0;
  GLINT_CHECK(!opt.run.output.empty(), "the run has no output directory (TrainOptions::output)");
  StopSignals stop_signals;
  const bool resumed = start_step > 0;
  const Learner* own = tenant_run ? nullptr : job_.learners().front().get();  // the run's own adapter or parameters
  std::vector<std::string> notes;  // printed after the setup report
  std::unique_ptr<MetricsWriter> metrics;
  // A resumed run appends, after dropping the records of steps its checkpoint lacks.
  auto open_metrics = [&](const std::string& path, int64_t saved_step) {
    if (resumed) {
      int64_t dropped = drop_records_after(path, "step", saved_step);
      if (dropped > 0)
        notes.push_back(path + ": dropped " + std::to_string(dropped) + " records after step " +
                        std::to_string(saved_step) + " (steps the checkpoint does not hold)");
    }
    return std::make_unique<MetricsWriter>(path, resumed);
  };
  if (lead) {
    make_dirs(opt.run.output);
    metrics = open_metrics(opt.run.output + "/metrics.jsonl", start_step);
  }
  job_.save_random_base();
  // Multi-tenant: each tenant's steps also go to OUT/<tenant>/metrics.jsonl.
  std::map<std::string, std::unique_ptr<MetricsWriter>> tenant_metrics;
  if (lead)
    for (const auto& t : job_.tenant_learners()) {
      make_dirs(opt.run.output + "/" + t->name);
      tenant_metrics[t->name] = open_metrics(opt.run.output + "/" + t->name + "/metrics.jsonl", t->step);
    }
  // OUT/report.html, refreshed with every readable line (glint plot draws the same). A
  // failure to draw it is reported once and never stops the training.
  std::unique_ptr<ReportWriter> report;
  std::string report_error;
  if (lead) report = std::make_unique<ReportWriter>(opt.run.output);
  // A resumed run's elapsed time goes on from its last record (at the checkpoint's step).
  const double earlier_seconds = lead && resumed ? last_record_number(opt.run.output + "/metrics.jsonl", "elapsed_s", 0) : 0;
  Progress progress(lead ? opt.optim.steps - start_step : 0, earlier_seconds);
  auto refresh_report = [&] {
    if (!report) return;
    std::string error = report->try_write();
    if (!error.empty() && report_error.empty()) progress.line("report.html not written: " + error);
    report_error = error;
  };
  auto say = [&](const std::string& line) {
    if (lead) progress.line(line);
  };
  for (const std::string& line : job_.setup_report()) say(line);
  for (const std::string& line : notes) say(line);
  if (resumed && start_step >= opt.optim.steps) {
    say("step " + std::to_string(start_step) + " is the run's last (--steps " + std::to_string(opt.optim.steps) +
        "): nothing is left to train; writing its outputs from the checkpoint");
    if (lead) progress.finish();
    job_.save_outputs();
    return;
  }
  say("each line: loss and tok/s are means over the steps since the previous line; grad_norm and lr are the "
      "line's step's (every step is in " + opt.run.output + "/metrics.jsonl)");
  const uint64_t eval_seed = opt.seed + 1000003;  // held-out samples: a different stream
  // Sharded layers and experts make every forward collective: then all ranks evaluate.
  const bool evaluates = job_.builtin_task() && opt.data.eval_samples > 0 && (lead || job_.forwards_are_collective());
  char buf[512];
  double first_acc = -1, last_acc = -1;
  if (evaluates && !resumed) {
    first_acc = job_.evaluate_exact_match(opt.data.eval_samples, eval_seed);
    std::snprintf(buf, sizeof buf, "step %*d/%lld  held-out exact match %5.1f%%", int(std::to_string(opt.optim.steps).size()),
                  0, (long long)opt.optim.steps, 100 * first_acc);
    say(buf);
  }
  // Means over the steps since the previous line: the run's, and each tenant's.
  struct Window {
    double loss = 0, seconds = 0;
    int64_t steps = 0, tokens = 0;
  } window;
  std::map<std::string, Window> tenant_window;
  double first_loss = 0, last_loss = 0;
  const int width = int(std::to_string(opt.optim.steps).size());
  // --profile: every step after the run's first (which allocates what the later ones
  // reuse), or the only one; OUT/profile.json and a summary at the end.
  std::unique_ptr<profile::Profiler> profiler;
  if (opt.run.profile) profiler = std::make_unique<profile::Profiler>();
  auto write_profile = [&] {
    if (!lead || !profiler || profiler->steps() == 0) return;
    write_text_atomic(opt.run.output + "/profile.json", profiler->report(30).dump(1) + "\n");
    std::istringstream lines(profiler->text());
    for (std::string line; std::getline(lines, line);) say(line);
    say("profile: " + opt.run.output + "/profile.json");
  };
  auto wall_time = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  for (int64_t s = start_step + 1; s <= opt.optim.steps; ++s) {
    std::vector<Batch> micro_batches = job_.next_micro_batches();
    const bool profiled = profiler && (s > start_step + 1 || opt.optim.steps == start_step + 1);
    if (profiled) profiler->start();
    StepStats st = job_.step(micro_batches);
    if (profiled) {
      profiler->stop();
      profiler->note_step();
    }
    if (s == start_step + 1) first_loss = st.loss;
    last_loss = st.loss;
    window.loss += st.loss;
    window.seconds += st.seconds;
    window.tokens += st.tokens;
    ++window.steps;
    for (const auto& t : st.tenants) {
      Window& w = tenant_window[t.name];
      w.loss += t.loss;
      ++w.steps;
    }
    // Collective parts first (every rank): evaluations, the stop request, the checkpoint.
    const bool eval_now = (opt.run.eval_every > 0 && s % opt.run.eval_every == 0) || s == opt.optim.steps;
    if (evaluates && eval_now) last_acc = job_.evaluate_exact_match(opt.data.eval_samples, eval_seed);
    double eval_loss = -1;
    int64_t eval_tokens = 0;
    if (eval_now && own && !own->eval_samples.empty())
      eval_loss = job_.evaluate_loss(own->eval_samples, opt.optim.batch_size, -1, &eval_tokens);
    std::map<std::string, double> tenant_eval;
    for (const auto& t : job_.tenant_learners())
      if (eval_now && !t->eval_samples.empty())
        tenant_eval[t->name] = job_.evaluate_loss(t->eval_samples, t->batch_size, t->slot, nullptr);
    // A stop signal reaches the ranks at different moments: they agree on it here.
    at::Tensor stop = at::tensor({double(StopSignals::received())}, at::kDouble);
    if (comm.size() > 1) comm.all_reduce_sum(stop);
    const bool signalled = stop.item<double>() != 0;
    const bool stopping = signalled || (opt.run.stop_after > 0 && s == opt.run.stop_after && s < opt.optim.steps);
    if (lead) {
      const double epoch =
          !own || own->samples.empty() ? 0 : double(s) * double(opt.optim.batch_size) / double(own->samples.size());
      nlohmann::json rec = {{"step", s},
                            {"loss", st.loss},
                            {"tokens", st.tokens},
                            {"label_tokens", st.label_tokens},
                            {"tokens_per_s", st.tokens / st.seconds},
                            {"peak_rss_mb", peak_rss_mb()},
                            {"weights_mb", double(job_.local_weight_bytes()) / (1 << 20)},
                            {"time", wall_time()},
                            {"elapsed_s", progress.run_seconds()}};
      // A tenant run's gradient norms and learning rates are the tenants' (their records).
      if (!tenant_run) {
        rec["grad_norm"] = st.grad_norm;
        rec["lr"] = st.lr;
        rec["epoch"] = epoch;
      }
      if (st.aux_loss >= 0) rec["aux_loss"] = st.aux_loss;
      if (st.idle_experts >= 0) {
        rec["idle_experts"] = st.idle_experts;
        rec["expert_load_max"] = st.expert_load_max;
      }
      if (comm.size() > 1) rec["ranks"] = comm.size();
      if (evaluates && eval_now) rec["exact_match"] = last_acc;
      if (eval_loss >= 0) {
        rec["eval_loss"] = eval_loss;
        rec["eval_label_tokens"] = eval_tokens;
      }
      // Where the step's time went (this rank's; the optimizer part includes the gradient
      // reduction and clipping).
      rec["forward_s"] = st.forward_seconds;
      rec["backward_s"] = st.backward_seconds;
      rec["optimizer_s"] = st.optimizer_seconds;
      const compat::DeviceMemory gpu = compat::device_memory(job_.model().placement.device);
      if (gpu.peak_allocated_mb >= 0) {  // on a GPU: the step's peak, and the driver calls so far
        rec["peak_gpu_mb"] = gpu.peak_allocated_mb;
        rec["gpu_device_allocs"] = gpu.device_allocs;
        rec["gpu_device_frees"] = gpu.device_frees;
        compat::reset_device_memory_peak(job_.model().placement.device);
      }
      metrics->write(rec);
      std::map<std::string, double> tenant_epoch;
      for (const auto& t : job_.tenant_learners())
        tenant_epoch[t->name] = double(t->step) * double(t->batch_size) / double(std::max<size_t>(1, t->samples.size()));
      for (const auto& t : st.tenants) {
        nlohmann::json trec = {{"step", t.step}, {"loss", t.loss}, {"grad_norm", t.grad_norm},
                               {"lr", t.lr}, {"label_tokens", t.label_tokens},
                               {"epoch", tenant_epoch[t.name]}, {"time", wall_time()},
                               {"elapsed_s", progress.run_seconds()}};
        if (tenant_eval.count(t.name)) trec["eval_loss"] = tenant_eval[t.name];
        tenant_metrics.at(t.name)->write(trec);
      }
      if (tenant_run)  // the tenants' learning rates are their own lines'
        std::snprintf(buf, sizeof buf, "loss %.4f  %.0f tok/s", st.loss, st.tokens / st.seconds);
      else
        std::snprintf(buf, sizeof buf, "loss %.4f  lr %.2e  %.0f tok/s", st.loss, st.lr, st.tokens / st.seconds);
      progress.update(s - start_step, buf);
      // The first step gets a line at once: a slow step should not leave the screen blank.
      if (s == start_step + 1 || s % opt.run.log_every == 0 || s == opt.optim.steps || eval_now || stopping) {
        int n = std::snprintf(buf, sizeof buf, "step %*lld/%lld  loss%s %.4f", width, (long long)s,
                              (long long)opt.optim.steps, tenant_run ? " (all tenants)" : "", window.loss / double(window.steps));
        if (!tenant_run) n += std::snprintf(buf + n, sizeof buf - n, "  grad_norm %.3f  lr %.2e", st.grad_norm, st.lr);
        n += std::snprintf(buf + n, sizeof buf - n, "  %.0f tok/s", double(window.tokens) / window.seconds);
        if (!tenant_run) n += std::snprintf(buf + n, sizeof buf - n, "  epoch %.2f", epoch);
        n += std::snprintf(buf + n, sizeof buf - n, "  rss %.0f MB  %s", peak_rss_mb(),
                           progress.timing(s - start_step).c_str());
        if (evaluates && eval_now)
          n += std::snprintf(buf + n, sizeof buf - n, "  held-out exact match %5.1f%%", 100 * last_acc);
        if (eval_loss >= 0) std::snprintf(buf + n, sizeof buf - n, "  eval_loss %.4f", eval_loss);
        say(buf);
        // Tenant runs: one line per tenant that trained since the previous line.
        for (const auto& t : st.tenants) {
          Window& w = tenant_window[t.name];
          if (w.steps == 0) continue;
          n = std::snprintf(buf, sizeof buf, "  tenant %s  step %lld  loss %.4f  grad_norm %.3f  lr %.2e  epoch %.2f",
                            t.name.c_str(), (long long)t.step, w.loss / double(w.steps), t.grad_norm, t.lr,
                            tenant_epoch[t.name]);
          if (tenant_eval.count(t.name)) std::snprintf(buf + n, sizeof buf - n, "  eval_loss %.4f", tenant_eval[t.name]);
          say(buf);
        }
        window = Window();
        tenant_window.clear();
        refresh_report();
      }
    }
    if (stopping || (opt.run.save_every > 0 && (s % opt.run.save_every == 0 || s == opt.optim.steps))) {
      job_.save_checkpoint_now();
      say("checkpoint " + job_.last_checkpoint());
    }
    if (stopping) {
      stopped_ = true;
      refresh_report();
      write_profile();
      if (lead) progress.finish();
 const int sig = StopSignals::received();
      say(std::string("stopped by ") +
          (!signalled ? "--stop-after" : sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a stop signal to another rank") +
          " after step " + std::to_string(s) + "; to continue: " +
          launch_command_line(World::from_env().launch_json(), "glint train --resume " + opt.run.output));
      return;
    }
  }
  if (!lead) {
    job_.save_outputs();  // collective when layers are sharded
    return;
  }
  refresh_report();
  progress.finish();
  write_profile();
  int n = std::snprintf(buf, sizeof buf, "loss %.4f at step %lld -> %.4f at step %lld in %s", first_loss,
                        (long long)(start_step + 1), last_loss, (long long)opt.optim.steps,
                        format_duration(progress.elapsed_seconds()).c_str());
  if (first_acc >= 0 && last_acc >= 0)
    std::snprintf(buf + n, sizeof buf - n, "; held-out exact match %.1f%% -> %.1f%%", 100 * first_acc,
                  100 * last_acc);
  say(buf);
  job_.save_outputs();
}

}  // namespace glint

