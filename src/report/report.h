// OUT/report.html: a picture of a training run, drawn from its metrics.jsonl files.
//
// One self-contained HTML file (inline SVG and CSS; no script, no network, no font or
// file beside it): a header (the run, steps done, last loss and evaluation loss, tokens,
// the run's elapsed time across resumes, each tenant's step and losses, when it was
// written) and charts against the step: training loss with the evaluation loss on the
// same axes, learning rate, gradient norm, tokens/s, exact match when the run has it.
// A multi-tenant run's learning rate, gradient norm and loss charts have one line per
// tenant against its own step, with a legend naming them; its run-wide figures say
// "(all tenants)". Every chart has a title, and a legend when it has more than one line.
// Numbers are written by format_number (train/metrics.h): a loss with 4 decimals (as
// the console lines), counts and steps whole, both grouped in thousands. Each line keeps
// at most max_points points (report/svg_chart.h: min/max per bucket, so spikes survive).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace glint {

class MetricsLog;

struct ReportOptions {
  // The file written; "" is RUN_DIR/report.html.
  std::string output;
  // The most points one line of a chart keeps.
  size_t max_points = 2000;
};

// Draws the report of one run directory, keeping what it has read: each write() reads
// only the metrics lines appended since the last one (plus the tenants that appeared),
// so a trainer can call it at every log interval of a 100k-step run for the cost of the
// new lines and of drawing at most max_points points per line.
class ReportWriter {
 public:
  explicit ReportWriter(std::string run_dir, ReportOptions options = {});
  ~ReportWriter();

  // Reads RUN_DIR/metrics.jsonl and every RUN_DIR/<name>/metrics.jsonl (the tenants of a
  // multi-tenant run) and replaces the output file atomically. Throws glint::Error when
  // RUN_DIR is not a directory, has no metrics.jsonl, or a file cannot be read or written.
  void write();

  // write() for a caller that must not stop (a training loop): "" on success, else the
  // message of what went wrong. Never throws; the previous report is then left as it was.
  std::string try_write() noexcept;

 private:
  std::string run_dir_;
  ReportOptions options_;
  std::unique_ptr<MetricsLog> run_;
  std::vector<std::pair<std::string, std::unique_ptr<MetricsLog>>> tenants_;  // by name
};

// ReportWriter(run_dir, options).write(): one picture, for a run read once.
void write_report(const std::string& run_dir, const ReportOptions& options = {});

}  // namespace glint
