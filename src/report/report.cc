#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "core/fs.h"
#include "report/metrics_log.h"
#include "report/svg_chart.h"
#include "train/metrics.h"

namespace glint {

namespace fs = std::filesystem;

namespace {

// Tableau 10: distinguishable, and readable on white.
const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

const std::vector<std::string> kRunFields = {"loss", "eval_loss", "grad_norm", "lr", "tokens",
                                             "tokens_per_s", "exact_match", "elapsed_s"};
const std::vector<std::string> kTenantFields = {"loss", "eval_loss", "grad_norm", "lr"};

const char* const kStyle = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; background: #fff;
       margin: 24px auto; max-width: 1000px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 8px; }
dl.summary { display: flex; flex-wrap: wrap; gap: 4px 24px; margin: 0 0 8px; }
dl.summary div { display: flex; gap: 6px; }
dl.summary dt { color: #666; }
dl.summary dd { margin: 0; font-weight: 600; }
p.notes { color: #8a4b00; font-size: 13px; margin: 4px 0; }
p.empty { font-size: 16px; color: #666; margin: 32px 0; }
figure { margin: 16px 0; }
svg.chart { max-width: 100%; height: auto; font-size: 12px; }
svg.chart path { fill: none; stroke-width: 1.5; stroke-linejoin: round; }
svg.chart .grid line { stroke: #ececec; }
svg.chart .frame { fill: none; stroke: #999; }
svg.chart .ticks text { fill: #555; }
svg.chart .ticks.y text { text-anchor: end; }
svg.chart .ticks.x text { text-anchor: middle; }
svg.chart .title { font-size: 15px; font-weight: 600; }
svg.chart .axis-label { text-anchor: middle; fill: #555; }
svg.chart .legend line { stroke-width: 2; }
)";

// The precision of each kind of figure, the same everywhere on the page (a loss as the
// console lines write it).
constexpr int kLossDecimals = 4;
constexpr int kPercentDecimals = 1;

std::string loss_text(double v) { return format_number(v, kLossDecimals); }
std::string count_text(double n) { return format_number(n, 0); }

// The run's elapsed seconds at its last record. A run resumed by a glint that restarted
// elapsed_s in each process shows as a drop: each part's last value is added.
double run_elapsed(const MetricColumn& c) {
  double earlier = 0, previous = 0;
  for (double v : c.value) {
    if (v < previous) earlier += previous;
    previous = v;
  }
  return earlier + previous;
}

std::string local_time_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", &tm);
  return buf;
}

// The directory's own name: "runs/xyz/" -> "xyz".
std::string run_name(const std::string& run_dir) {
  fs::path p = fs::absolute(fs::path(run_dir)).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// A column as a chart line: in step order (a file that holds two runs' records one after
// the other is sorted), at most max_points points.
ChartSeries series_of(const MetricColumn& c, std::string id, std::string label, std::string color,
                      size_t max_points) {
  ChartSeries s;
  s.id = std::move(id);
  s.label = std::move(label);
  s.color = std::move(color);
  if (std::is_sorted(c.step.begin(), c.step.end())) {
    downsample_min_max(c.step, c.value, max_points, &s.x, &s.y);
    return s;
  }
  std::vector<size_t> order(c.step.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return c.step[a] < c.step[b]; });
  std::vector<double> x, y;
  for (size_t i : order) {
    x.push_back(c.step[i]);
    y.push_back(c.value[i]);
  }
  downsample_min_max(x, y, max_points, &s.x, &s.y);
  return s;
}

// What a log skipped, as sentences; `name` is its path inside the run directory.
std::vector<std::string> notes_of(const MetricsLog& log, const std::string& name) {
  std::vector<std::string> out;
  if (log.bad_lines() > 0)
    out.push_back(name + ": " + count_text(double(log.bad_lines())) + (log.bad_lines() == 1 ? " line" : " lines") +
                  " skipped (not a JSON record with a numeric step; the first is line " +
                  count_text(double(log.first_bad_line())) + ")");
  if (log.pending_tail()) out.push_back(name + ": the last line is incomplete (being written, or cut short)");
  if (!log.bad_values().empty()) {
    int64_t total = 0;
    std::string per;
    for (const auto& [field, n] : log.bad_values()) {
      total += n;
      per += (per.empty() ? "" : ", ") + field + " " + count_text(double(n));
    }
    out.push_back(name + ": " + count_text(double(total)) + " NaN, infinite or non-numeric " +
                  (total == 1 ? "value" : "values") + " skipped (" + per + ")");
  }
  return out;
}

Chart make_chart(std::string id, std::string title, std::vector<ChartSeries> series = {}) {
  Chart c;
  c.id = std::move(id);
  c.title = std::move(title);
  c.series = std::move(series);
  return c;
}

void summary_item(std::ostringstream& o, const std::string& term, const std::string& value) {
  o << "<div><dt>" << escape_html(term) << "</dt><dd>" << escape_html(value) << "</dd></div>";
}

}  // namespace

ReportWriter::ReportWriter(std::string run_dir, ReportOptions options)
    : run_dir_(std::move(run_dir)), options_(std::move(options)) {
  if (options_.output.empty()) options_.output = run_dir_ + "/report.html";
  GLINT_CHECK(options_.max_points >= 2, "report: max_points must be at least 2, not ", options_.max_points);
}

ReportWriter::~ReportWriter() = default;

std::string ReportWriter::try_write() noexcept {
  try {
    write();
    return "";
  } catch (const std::exception& e) {  // by contract: nothing gets out (see report.h)
    return e.what();
  } catch (...) {
    return "report: unknown error";
  }
}

void ReportWriter::write() {
  std::error_code ec;
  GLINT_CHECK(fs::is_directory(run_dir_, ec), run_dir_, ": not a directory (expected a training run's output directory)");
  const std::string metrics = run_dir_ + "/metrics.jsonl";
  GLINT_CHECK(fs::is_regular_file(metrics, ec), metrics,
              ": not found (expected the output directory of a glint train run, which writes it at its first step)");
  if (!run_) run_ = std::make_unique<MetricsLog>(metrics, kRunFields);
  run_->refresh();

  // Tenants: subdirectories holding a metrics.jsonl, by name; logs already read are kept.
  std::vector<std::string> names;
  for (fs::directory_iterator it(run_dir_, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec) && fs::is_regular_file(it->path() / "metrics.jsonl", ec))
      names.push_back(it->path().filename().string());
  GLINT_CHECK(!ec, run_dir_, ": cannot list the directory (", ec.message(), ")");
  std::sort(names.begin(), names.end());
  std::vector<std::pair<std::string, std::unique_ptr<MetricsLog>>> tenants;
  for (const std::string& name : names) {
    auto old = std::find_if(tenants_.begin(), tenants_.end(), [&](const auto& t) { return t.first == name; });
    tenants.emplace_back(name, old != tenants_.end() ? std::move(old->second)
                                                     : std::make_unique<MetricsLog>(
                                                           run_dir_ + "/" + name + "/metrics.jsonl", kTenantFields));
    tenants.back().second->refresh();
  }
  tenants_ = std::move(tenants);

  const MetricsLog& run = *run_;
  const size_t cap = options_.max_points;
  const std::string name = run_name(run_dir_);
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>glint run "
    << escape_html(name) << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n<header>\n<h1>glint run "
    << escape_html(name) << "</h1>\n<dl class=\"summary\">";
  // A multi-tenant run's own records are of the whole batch, every tenant together.
  const bool tenant_run = !tenants_.empty();
  const std::string together = tenant_run ? " (all tenants)" : "";
  summary_item(o, "steps", run.records() > 0 ? count_text(run.last_step()) : "none yet");
  const MetricColumn& loss = run.column("loss");
  const MetricColumn& eval = run.column("eval_loss");
  const MetricColumn& em = run.column("exact_match");
  if (!loss.empty()) summary_item(o, "last loss" + together, loss_text(loss.value.back()));
  if (!eval.empty())
    summary_item(o, "last eval loss" + together,
                 loss_text(eval.value.back()) + " (step " + count_text(eval.step.back()) + ")");
  if (!em.empty()) summary_item(o, "exact match", format_number(100 * em.value.back(), kPercentDecimals) + "%");
  const MetricColumn& tokens = run.column("tokens");
  if (!tokens.empty())
    summary_item(o, "tokens", count_text(std::accumulate(tokens.value.begin(), tokens.value.end(), 0.0)));
  const MetricColumn& elapsed = run.column("elapsed_s");
  if (!elapsed.empty()) summary_item(o, "elapsed", format_duration(run_elapsed(elapsed)));
  for (const auto& [tname, log] : tenants_) {
    const MetricColumn& tl = log->column("loss");
    const MetricColumn& te = log->column("eval_loss");
    std::string v = "step " + count_text(log->last_step());
    if (!tl.empty()) v += ", loss " + loss_text(tl.value.back());
    if (!te.empty()) v += ", eval loss " + loss_text(te.value.back());
    summary_item(o, "tenant " + tname, v);
  }
  summary_item(o, "written", local_time_now());
  o << "</dl>\n";
  std::vector<std::string> notes = notes_of(run, "metrics.jsonl");
  for (const auto& [tname, log] : tenants_)
    for (std::string& n : notes_of(*log, tname + "/metrics.jsonl")) notes.push_back(std::move(n));
  for (const std::string& n : notes) o << "<p class=\"notes\">" << escape_html(n) << "</p>\n";
  o << "</header>\n<main>\n";

  if (run.records() == 0) {
    o << "<p class=\"empty\">No records yet: " << escape_html(metrics)
      << " holds no training step. The charts appear once the run has logged its first step.</p>\n";
  } else {
    // Every chart says what it shows: its title, and a legend naming each line when it
    // has more than one.
    auto figure = [&](Chart chart) {
      int drawn = 0;
      for (const ChartSeries& s : chart.series) drawn += !s.x.empty();
      chart.legend = chart.legend || drawn > 1;
      if (drawn > 0 || chart.id == "loss") o << "<figure>\n" << render_chart(chart) << "</figure>\n";
    };
    // A field of every tenant, one line each in the tenant's colour, against its own step.
    auto per_tenant = [&](const std::string& id, std::string title, const std::string& field) {
      Chart c = make_chart(id, std::move(title));
      c.x_label = "the tenant's own step";
      for (size_t i = 0; i < tenants_.size(); ++i) {
        const auto& [tname, log] = tenants_[i];
        c.series.push_back(series_of(log->column(field), id + "/" + tname, tname, kPalette[i % std::size(kPalette)], cap));
      }
      c.legend = true;
      return c;
    };
    Chart lc = make_chart("loss", (eval.empty() ? "Training loss" : "Loss") + together);
    lc.series.push_back(series_of(loss, "loss", "training loss" + together, kPalette[0], cap));
    if (!eval.empty()) {
      lc.series.push_back(series_of(eval, "eval_loss", "evaluation loss" + together, kPalette[1], cap));
      lc.series.back().markers = true;
    }
    figure(lc);
    // A tenant run's learning rates and gradient norms are the tenants' own (the run's
    // records of an older glint held the first tenant's, unnamed: they are not drawn).
    if (tenant_run) {
      figure(per_tenant("tenant_lr", "Learning rate per tenant", "lr"));
      figure(per_tenant("tenant_grad_norm", "Gradient norm per tenant (before clipping)", "grad_norm"));
    } else {
      figure(make_chart("lr", "Learning rate", {series_of(run.column("lr"), "lr", "lr", kPalette[4], cap)}));
      figure(make_chart("grad_norm", "Gradient norm (before clipping)",
                        {series_of(run.column("grad_norm"), "grad_norm", "grad_norm", kPalette[2], cap)}));
    }
    figure(make_chart("tokens_per_s", "Throughput, tokens/s" + together,
                      {series_of(run.column("tokens_per_s"), "tokens_per_s", "tokens/s", kPalette[6], cap)}));
    if (!em.empty()) {
      Chart ec = make_chart("exact_match", "Held-out exact match, %");  // as the header and the console
      ec.series.push_back(series_of(em, "exact_match", "exact match", kPalette[3], cap));
      for (double& v : ec.series.back().y) v *= 100;
      ec.series.back().markers = true;
      figure(ec);
    }
    if (tenant_run) {
      Chart tc = make_chart("tenants", "Loss per tenant");
      tc.x_label = "the tenant's own step";
      tc.legend = true;
      for (size_t i = 0; i < tenants_.size(); ++i) {
        const auto& [tname, log] = tenants_[i];
        const char* color = kPalette[i % std::size(kPalette)];
        tc.series.push_back(series_of(log->column("loss"), "tenant/" + tname, tname, color, cap));
        if (!log->column("eval_loss").empty()) {
          tc.series.push_back(series_of(log->column("eval_loss"), "tenant_eval/" + tname, tname + " eval", color, cap));
          tc.series.back().dashed = tc.series.back().markers = true;
        }
      }
      figure(tc);
    }
  }
  o << "</main>\n</body>\n</html>\n";
  write_text_atomic(options_.output, o.str());
}

void write_report(const std::string& run_dir, const ReportOptions& options) {
  ReportWriter(run_dir, options).write();
}

}  // namespace glint
