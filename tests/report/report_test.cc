// OUT/report.html (report/report.h, svg_chart.h): the charts are read back from the HTML
// and every drawn point is mapped back to a value with the axis range the chart states,
// against values computed here from the data written, not by the report code.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/fs.h"
#include "report/report.h"
#include "report/svg_chart.h"
#include "test_util.h"
#include "train/metrics.h"

namespace {

namespace fs = std::filesystem;
using glint::testing::fresh_temp_dir;

// ---- reading the page back ----

struct Path {
  std::string series;
  int declared_points = 0;
  std::vector<double> x, y;  // SVG coordinates
  std::string attributes;    // everything inside the tag
};

struct Svg {
  std::string chart;
  double x_min = 0, x_max = 0, y_min = 0, y_max = 0;
  double left = 0, top = 0, width = 0, height = 0;
  std::string text;  // the whole element
  std::vector<Path> paths;
  const Path* path(const std::string& series) const {
    for (const Path& p : paths)
      if (p.series == series) return &p;
    return nullptr;
  }
  // The value a y coordinate stands for, from the chart's stated axis and plot box.
  double value_at(double py) const { return y_min + (1 - (py - top) / height) * (y_max - y_min); }
  double step_at(double px) const { return x_min + (px - left) / width * (x_max - x_min); }
};

// The value of ` name="..."` in a tag ("" when absent). Plain string search: libstdc++'s
// std::regex recurses per character and overflows the stack on a 30 KB path.
std::string attribute(const std::string& tag, const std::string& name) {
  const std::string key = " " + name + "=\"";
  size_t at = tag.find(key);
  if (at == std::string::npos) return "";
  at += key.size();
  return tag.substr(at, tag.find('"', at) - at);
}

// The points of a path's d attribute: "M x,y L x,y ...".
void read_points(const std::string& d, std::vector<double>* x, std::vector<double>* y) {
  std::istringstream in(d);
  char command, comma;
  double px, py;
  while (in >> command >> px >> comma >> py) {
    EXPECT_TRUE((command == 'M' && x->empty()) || (command == 'L' && !x->empty())) << command;
    EXPECT_EQ(comma, ',');
    x->push_back(px);
    y->push_back(py);
  }
}

std::vector<Svg> read_charts(const std::string& html) {
  std::vector<Svg> out;
  for (size_t at = html.find("<svg "); at != std::string::npos; at = html.find("<svg ", at + 1)) {
    Svg s;
    s.text = html.substr(at, html.find("</svg>", at) - at);
    std::string tag = s.text.substr(0, s.text.find('>'));
    s.chart = attribute(tag, "data-chart");
    s.x_min = std::stod(attribute(tag, "data-x-min"));
    s.x_max = std::stod(attribute(tag, "data-x-max"));
    s.y_min = std::stod(attribute(tag, "data-y-min"));
    s.y_max = std::stod(attribute(tag, "data-y-max"));
    std::istringstream(attribute(tag, "data-plot")) >> s.left >> s.top >> s.width >> s.height;
    for (size_t p = s.text.find("<path "); p != std::string::npos; p = s.text.find("<path ", p + 1)) {
      Path path;
      path.attributes = s.text.substr(p, s.text.find('>', p) - p);
      path.series = attribute(path.attributes, "data-series");
      path.declared_points = std::stoi(attribute(path.attributes, "data-points"));
      read_points(attribute(path.attributes, "d"), &path.x, &path.y);
      s.paths.push_back(std::move(path));
    }
    out.push_back(std::move(s));
  }
  return out;
}

const Svg* chart(const std::vector<Svg>& charts, const std::string& id) {
  for (const Svg& s : charts)
    if (s.chart == id) return &s;
  return nullptr;
}

// The texts of one <g class="ticks y"> group.
std::vector<std::string> y_tick_labels(const Svg& s) {
  size_t g = s.text.find("<g class=\"ticks y\">");
  std::string group = s.text.substr(g, s.text.find("</g>", g) - g);
  std::vector<std::string> out;
  std::regex text(">([^<]+)</text>");
  for (auto it = std::sregex_iterator(group.begin(), group.end(), text); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

// ---- writing runs ----

// A deterministic loss in [0.7, 3.1] that goes up and down.
double loss_at(int step) { return 1.9 + 1.2 * std::sin(step * 1.7) * std::cos(step * 0.31); }

using glint::testing::write_file;

// `n` records as the trainer writes them (a record does not depend on n); eval_loss
// every 10th step; lr reaches 2e-4 at step 50.
std::string run_records(int n) {
  std::ostringstream o;
  o.precision(17);
  for (int s = 1; s <= n; ++s) {
    o << "{\"step\":" << s << ",\"loss\":" << loss_at(s) << ",\"grad_norm\":" << 0.5 + 0.01 * s
      << ",\"lr\":" << 4e-6 * s << ",\"tokens\":512,\"tokens_per_s\":" << 1000 + s
      << ",\"epoch\":0.5,\"time\":1.7e9,\"elapsed_s\":" << s;
    if (s % 10 == 0) o << ",\"eval_loss\":" << 2.0 - 0.01 * s;
    o << "}\n";
  }
  return o.str();
}

// A tenant's records: its lr is scale * 1e-5 and its gradient norm scale + 0.01 * step.
std::string tenant_records(int n, double scale) {
  std::ostringstream o;
  o.precision(17);
  for (int s = 1; s <= n; ++s) {
    o << "{\"step\":" << s << ",\"loss\":" << scale / s << ",\"grad_norm\":" << scale + 0.01 * s
      << ",\"lr\":" << scale * 1e-5;
    if (s % 5 == 0) o << ",\"eval_loss\":" << scale / s + 0.1;
    o << "}\n";
  }
  return o.str();
}

// A run directory with 50 steps and the tenants "support" (50 steps) and "legal" (20),
// or with no tenant (a single adapter's run).
std::string make_run(const std::string& name, int n = 50, bool tenants = true) {
  std::string d = fresh_temp_dir("report_" + name);
  write_file(d + "/metrics.jsonl", run_records(n));
  if (!tenants) return d;
  fs::create_directories(d + "/support");
  fs::create_directories(d + "/legal");
  fs::create_directories(d + "/checkpoints");  // no metrics.jsonl: not a tenant
  write_file(d + "/support/metrics.jsonl", tenant_records(n, 3.0));
  write_file(d + "/legal/metrics.jsonl", tenant_records(20, 4.0));
  return d;
}

std::string read(const std::string& path) { return glint::read_file(path); }

// Every point of `p` stands for (steps[i], values[i]) under the chart's axes: the SVG
// keeps two decimals, so a coordinate is off by at most 0.005 units.
void expect_points_map_to(const Svg& s, const Path& p, const std::vector<double>& steps,
                          const std::vector<double>& values) {
  ASSERT_EQ(p.x.size(), steps.size()) << p.series;
  ASSERT_EQ(p.declared_points, int(steps.size())) << p.series;
  const double x_unit = (s.x_max - s.x_min) / s.width, y_unit = (s.y_max - s.y_min) / s.height;
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_NEAR(s.step_at(p.x[i]), steps[i], 0.006 * x_unit) << p.series << " point " << i;
    EXPECT_NEAR(s.value_at(p.y[i]), values[i], 0.006 * y_unit) << p.series << " point " << i;
  }
}

TEST(Report, DrawsEveryChartWithPointsThatMapBackToTheData) {
  const int n = 50;
  std::string d = make_run("charts", n);
  glint::write_report(d);
  std::string html = read(d + "/report.html");
  std::vector<Svg> charts = read_charts(html);

  std::vector<std::string> ids;
  for (const Svg& s : charts) ids.push_back(s.chart);
  EXPECT_EQ(ids, (std::vector<std::string>{"loss", "tenant_lr", "tenant_grad_norm", "tokens_per_s", "tenants"}));

  const Svg* loss = chart(charts, "loss");
  ASSERT_TRUE(loss);
  const Path* lp = loss->path("loss");
  ASSERT_TRUE(lp);
  std::vector<double> steps, values;
  for (int s = 1; s <= n; ++s) {
    steps.push_back(s);
    values.push_back(loss_at(s));
  }
  EXPECT_EQ(lp->x.size(), size_t(n));
  for (size_t i = 1; i < lp->x.size(); ++i) EXPECT_LT(lp->x[i - 1], lp->x[i]) << "x goes forward at point " << i;
  expect_points_map_to(*loss, *lp, steps, values);

  // The axis covers the data, without wasting most of the height.
  const double lo = *std::min_element(values.begin(), values.end());
  const double hi = *std::max_element(values.begin(), values.end());
  EXPECT_LE(loss->y_min, lo);
  EXPECT_GE(loss->y_max, hi);
  EXPECT_LE(loss->y_max - loss->y_min, 2 * (hi - lo));
  // The lowest loss is the lowest point drawn and the highest the highest (SVG y grows down).
  const size_t at_lo = std::min_element(values.begin(), values.end()) - values.begin();
  const size_t at_hi = std::max_element(values.begin(), values.end()) - values.begin();
  EXPECT_DOUBLE_EQ(lp->y[at_lo], *std::max_element(lp->y.begin(), lp->y.end()));
  EXPECT_DOUBLE_EQ(lp->y[at_hi], *std::min_element(lp->y.begin(), lp->y.end()));
  EXPECT_NEAR(lp->y[at_lo], loss->top + (1 - (lo - loss->y_min) / (loss->y_max - loss->y_min)) * loss->height, 0.006);
  EXPECT_NEAR(lp->y[at_hi], loss->top + (1 - (hi - loss->y_min) / (loss->y_max - loss->y_min)) * loss->height, 0.006);

  // Evaluation loss on the same axes, as dots.
  const Path* ep = loss->path("eval_loss");
  ASSERT_TRUE(ep);
  std::vector<double> eval_steps, eval_values;
  for (int s = 10; s <= n; s += 10) {
    eval_steps.push_back(s);
    eval_values.push_back(2.0 - 0.01 * s);
  }
  expect_points_map_to(*loss, *ep, eval_steps, eval_values);
  EXPECT_NE(ep->attributes.find("marker-mid"), std::string::npos);

  // A single adapter's run: its own lr and gradient norm. lr of about 1e-4: tick labels
  // that tell the ticks apart, in scientific notation.
  const std::string single_dir = make_run("charts_single", n, /*tenants=*/false);
  glint::write_report(single_dir);
  std::vector<Svg> single = read_charts(read(single_dir + "/report.html"));
  ids.clear();
  for (const Svg& s : single) ids.push_back(s.chart);
  EXPECT_EQ(ids, (std::vector<std::string>{"loss", "lr", "grad_norm", "tokens_per_s"}));
  const Svg* lr = chart(single, "lr");
  ASSERT_TRUE(lr);
  std::vector<std::string> labels = y_tick_labels(*lr);
  ASSERT_GE(labels.size(), 3u);
  EXPECT_EQ(std::set<std::string>(labels.begin(), labels.end()).size(), labels.size());
  EXPECT_NE(std::find(labels.begin(), labels.end(), "2.0e-4"), labels.end()) << ::testing::PrintToString(labels);
  for (const std::string& l : labels) EXPECT_LE(l.size(), 7u) << l;

  // Tenants: one line each, with their evaluation loss, and a legend naming them.
  const Svg* tenants = chart(charts, "tenants");
  ASSERT_TRUE(tenants);
  for (const char* t : {"support", "legal"}) {
    const Path* tp = tenants->path(std::string("tenant/") + t);
    ASSERT_TRUE(tp) << t;
    EXPECT_EQ(tp->x.size(), std::string(t) == "support" ? size_t(n) : 20u);
    EXPECT_TRUE(tenants->path(std::string("tenant_eval/") + t)) << t;
    EXPECT_NE(tenants->text.find(std::string(">") + t + "</text>"), std::string::npos) << t;
    EXPECT_NE(tenants->text.find(std::string(">") + t + " eval</text>"), std::string::npos) << t;
  }
  std::vector<double> legal_steps, legal_values;
  for (int s = 1; s <= 20; ++s) {
    legal_steps.push_back(s);
    legal_values.push_back(4.0 / s);
  }
  expect_points_map_to(*tenants, *tenants->path("tenant/legal"), legal_steps, legal_values);

  // The header; nothing fetched from anywhere.
  EXPECT_NE(html.find("glint run " + fs::path(d).filename().string()), std::string::npos);
  EXPECT_NE(html.find("<dt>steps</dt><dd>50</dd>"), std::string::npos);
  EXPECT_NE(html.find("<dt>written</dt>"), std::string::npos);
  std::string stripped = html;
  const std::string xmlns = "xmlns=\"http://www.w3.org/2000/svg\"";
  for (size_t at; (at = stripped.find(xmlns)) != std::string::npos;) stripped.erase(at, xmlns.size());
  EXPECT_EQ(stripped.find("http://"), std::string::npos);
  EXPECT_EQ(stripped.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  for (size_t at = html.find("url("); at != std::string::npos; at = html.find("url(", at + 1))
    EXPECT_EQ(html[at + 4], '#') << "url() of something outside the page: " << html.substr(at, 40);
}

// A multi-tenant run's learning rates and gradient norms are each tenant's, drawn against
// the tenant's own step and named in a legend; the run's own figures say they are of all
// tenants together.
TEST(Report, ATenantRunDrawsEachTenantsLrAndGradNormByName) {
  std::string d = make_run("tenant_lr");
  glint::write_report(d);
  const std::string html = read(d + "/report.html");
  std::vector<Svg> charts = read_charts(html);
  // The run's records hold an lr and a gradient norm (an older glint wrote the first
  // tenant's there, unnamed): not drawn.
  EXPECT_FALSE(chart(charts, "lr"));
  EXPECT_FALSE(chart(charts, "grad_norm"));
  for (const std::string field : {"lr", "grad_norm"}) {
    const Svg* c = chart(charts, "tenant_" + field);
    ASSERT_TRUE(c) << field;
    EXPECT_NE(c->text.find(">the tenant&#39;s own step</text>"), std::string::npos) << field;
    for (const auto& [tenant, scale, steps] : {std::tuple{"support", 3.0, 50}, std::tuple{"legal", 4.0, 20}}) {
      const Path* p = c->path("tenant_" + field + "/" + tenant);
      ASSERT_TRUE(p) << field << " " << tenant;
      std::vector<double> xs, values;
      for (int s = 1; s <= steps; ++s) {
        xs.push_back(s);
        values.push_back(field == "lr" ? scale * 1e-5 : scale + 0.01 * s);
      }
      expect_points_map_to(*c, *p, xs, values);
      EXPECT_NE(c->text.find(std::string(">") + tenant + "</text>"), std::string::npos) << field << ": no legend";
    }
  }
  EXPECT_NE(html.find("<dt>last loss (all tenants)</dt>"), std::string::npos);
  EXPECT_NE(chart(charts, "loss")->text.find(">Loss (all tenants)</text>"), std::string::npos);
}

// Every figure goes through one formatter: a loss with 4 decimals wherever it stands,
// counts and steps grouped in thousands (tick labels too).
TEST(Report, FiguresHaveOnePrecisionAndThousandsSeparators) {
  std::string d = fresh_temp_dir("report_numbers");
  write_file(d + "/metrics.jsonl",
             "{\"step\":999,\"loss\":13.5,\"tokens\":1000000}\n"
             "{\"step\":12345,\"loss\":12,\"eval_loss\":11.91,\"tokens\":234567,\"exact_match\":0.5}\n");
  fs::create_directories(d + "/legal");
  write_file(d + "/legal/metrics.jsonl", "{\"step\":1500,\"loss\":2,\"eval_loss\":1.875}\n");
  glint::write_report(d);
  const std::string html = read(d + "/report.html");
  for (const char* item : {"<dt>steps</dt><dd>12,345</dd>", "<dt>last loss (all tenants)</dt><dd>12.0000</dd>",
                           "<dt>last eval loss (all tenants)</dt><dd>11.9100 (step 12,345)</dd>",
                           "<dt>tokens</dt><dd>1,234,567</dd>", "<dt>exact match</dt><dd>50.0%</dd>",
                           "<dt>tenant legal</dt><dd>step 1,500, loss 2.0000, eval loss 1.8750</dd>"})
    EXPECT_NE(html.find(item), std::string::npos) << item << "\n" << html.substr(0, html.find("</header>"));
  const std::vector<Svg> charts = read_charts(html);
  const Svg* loss = chart(charts, "loss");
  ASSERT_TRUE(loss);
  EXPECT_NE(loss->text.find(">10,000</text>"), std::string::npos) << "the x axis' tick at step 10,000";
}

TEST(Report, ElapsedIsTheWholeRunsAcrossResumes) {
  std::string d = fresh_temp_dir("report_elapsed");
  // Resumed after step 3 by a glint that restarted elapsed_s in each process: 90 s, then
  // 40 s more.
  write_file(d + "/metrics.jsonl",
             "{\"step\":1,\"elapsed_s\":30}\n{\"step\":2,\"elapsed_s\":60}\n{\"step\":3,\"elapsed_s\":90}\n"
             "{\"step\":4,\"elapsed_s\":20}\n{\"step\":5,\"elapsed_s\":40}\n");
  glint::write_report(d);
  EXPECT_NE(read(d + "/report.html").find("<dt>elapsed</dt><dd>2m10s</dd>"), std::string::npos);
  // As glint writes it: the resumed process goes on from the run's time.
  write_file(d + "/metrics.jsonl",
             "{\"step\":1,\"elapsed_s\":30}\n{\"step\":2,\"elapsed_s\":60}\n{\"step\":3,\"elapsed_s\":90}\n"
             "{\"step\":4,\"elapsed_s\":110}\n{\"step\":5,\"elapsed_s\":130}\n");
  glint::write_report(d);
  EXPECT_NE(read(d + "/report.html").find("<dt>elapsed</dt><dd>2m10s</dd>"), std::string::npos);
}

TEST(ReportNumbers, FormatNumberGroupsThousandsAtAFixedPrecision) {
  EXPECT_EQ(glint::format_number(1234567.891, 2), "1,234,567.89");
  EXPECT_EQ(glint::format_number(12, 4), "12.0000");
  EXPECT_EQ(glint::format_number(11.91, 4), "11.9100");
  EXPECT_EQ(glint::format_number(-1234.5, 1), "-1,234.5");
  EXPECT_EQ(glint::format_number(999.96, 1), "1,000.0");
  EXPECT_EQ(glint::format_number(123, 0), "123");
  EXPECT_EQ(glint::format_number(-123456, 0), "-123,456");
  EXPECT_EQ(glint::format_number(-0.00001, 4), "0.0000");
  EXPECT_EQ(glint::format_number(1e21, 0), "1,000,000,000,000,000,000,000");
  EXPECT_EQ(glint::format_number(NAN, 2), "nan");
  EXPECT_EQ(glint::format_number(-INFINITY, 2), "-inf");
}

TEST(Report, ReplacesTheFileAtomically) {
  std::string d = make_run("atomic");
  glint::write_report(d);
  const std::string first = read(d + "/report.html");
  fs::create_hard_link(d + "/report.html", d + "/old.html");
  struct stat before, after;
  ASSERT_EQ(::stat((d + "/report.html").c_str(), &before), 0);
  write_file(d + "/metrics.jsonl", run_records(60));
  glint::write_report(d);
  ASSERT_EQ(::stat((d + "/report.html").c_str(), &after), 0);
  // A new file was renamed over the old one: a reader holding the old one keeps it whole.
  EXPECT_NE(before.st_ino, after.st_ino);
  EXPECT_EQ(read(d + "/old.html"), first);
  EXPECT_NE(read(d + "/report.html").find("<dt>steps</dt><dd>60</dd>"), std::string::npos);
  for (const auto& e : fs::directory_iterator(d))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(Report, AWriterReadsAppendedLinesAndStartsAgainOnARewrittenFile) {
  std::string d = fresh_temp_dir("report_incremental");
  write_file(d + "/metrics.jsonl", run_records(30));
  glint::ReportWriter writer(d);
  auto loss_points = [&] {
    writer.write();
    std::vector<Svg> charts = read_charts(read(d + "/report.html"));
    return chart(charts, "loss")->path("loss")->x.size();
  };
  EXPECT_EQ(loss_points(), 30u);
  // The trainer appends; a line is half written when the report is drawn.
  std::string more = run_records(40).substr(run_records(30).size());
  std::ofstream(d + "/metrics.jsonl", std::ios::app) << more << "{\"step\":41,\"lo";
  EXPECT_EQ(loss_points(), 40u);
  EXPECT_NE(read(d + "/report.html").find("incomplete"), std::string::npos);
  std::ofstream(d + "/metrics.jsonl", std::ios::app) << "ss\":1.5}\n";
  EXPECT_EQ(loss_points(), 41u);
  // A whole record whose newline has not come yet is taken; the newline is not a line.
  std::ofstream(d + "/metrics.jsonl", std::ios::app) << "{\"step\":42,\"loss\":1.0}";
  EXPECT_EQ(loss_points(), 42u);
  std::ofstream(d + "/metrics.jsonl", std::ios::app) << "\nnot json\n";
  EXPECT_EQ(loss_points(), 42u);
  EXPECT_NE(read(d + "/report.html").find("1 line skipped (not a JSON record with a numeric step; the first is line 43)"),
            std::string::npos);
  // A resumed run drops the records after its checkpoint: the file is replaced, shorter.
  glint::write_text_atomic(d + "/metrics.jsonl", run_records(25));
  EXPECT_EQ(loss_points(), 25u);
}

TEST(Report, SkipsCutLinesAndNonFiniteValuesAndSaysHowMany) {
  std::string d = fresh_temp_dir("report_damaged");
  write_file(d + "/metrics.jsonl",
             "{\"step\":1,\"loss\":2.0}\n"
             "{\"step\":2,\"lo\n"  // cut short by a crash, then the resumed run went on
             "{\"step\":3,\"loss\":null}\n"  // how nlohmann::json writes a NaN
             "{\"step\":4,\"loss\":\"nan\"}\n"
             "{\"step\":5,\"loss\":1e999}\n"  // out of a double's range: not JSON a parser takes
             "[1,2]\n"
             "{\"step\":7,\"loss\":1.5}\n");
  glint::write_report(d);
  std::string html = read(d + "/report.html");
  std::vector<Svg> charts = read_charts(html);
  const Svg* loss = chart(charts, "loss");
  ASSERT_TRUE(loss);
  expect_points_map_to(*loss, *loss->path("loss"), {1, 7}, {2.0, 1.5});
  EXPECT_NE(html.find("<dt>steps</dt><dd>7</dd>"), std::string::npos);
  EXPECT_NE(html.find("metrics.jsonl: 3 lines skipped"), std::string::npos) << html;
  EXPECT_NE(html.find("the first is line 2"), std::string::npos);
  EXPECT_NE(html.find("2 NaN, infinite or non-numeric values skipped (loss 2)"), std::string::npos);
}

TEST(Report, NoRecordsGiveAPageSayingSo) {
  std::string d = fresh_temp_dir("report_empty");
  write_file(d + "/metrics.jsonl", "");
  glint::write_report(d);
  std::string html = read(d + "/report.html");
  EXPECT_NE(html.find("No records yet"), std::string::npos);
  EXPECT_NE(html.find("<dt>steps</dt><dd>none yet</dd>"), std::string::npos);
  EXPECT_EQ(html.find("<svg"), std::string::npos);
}

TEST(Report, OneRecordIsADotOnFiniteAxes) {
  std::string d = fresh_temp_dir("report_one");
  write_file(d + "/metrics.jsonl", run_records(1));
  glint::write_report(d);
  std::vector<Svg> charts = read_charts(read(d + "/report.html"));
  const Svg* loss = chart(charts, "loss");
  ASSERT_TRUE(loss);
  EXPECT_LT(loss->x_min, loss->x_max);
  EXPECT_LT(loss->y_min, loss->y_max);
  const Path* lp = loss->path("loss");
  ASSERT_TRUE(lp);
  expect_points_map_to(*loss, *lp, {1}, {loss_at(1)});
  EXPECT_NE(lp->attributes.find("marker-start"), std::string::npos);
}

TEST(Report, ALongRunIsDownsampledAndKeepsItsExtremes) {
  const int n = 100000;
  std::string d = fresh_temp_dir("report_long");
  {
    std::ofstream o(d + "/metrics.jsonl");
    for (int s = 1; s <= n; ++s) {
      double loss = s == 33333 ? 9.0 : s == 77777 ? 0.01 : 2.0 + 0.5 * std::sin(s * 0.01);
      o << "{\"step\":" << s << ",\"loss\":" << loss << ",\"lr\":1e-4,\"grad_norm\":1}\n";
    }
  }
  glint::write_report(d);
  std::vector<Svg> charts = read_charts(read(d + "/report.html"));
  const Svg* loss = chart(charts, "loss");
  ASSERT_TRUE(loss);
  const Path* lp = loss->path("loss");
  ASSERT_TRUE(lp);
  EXPECT_LE(lp->x.size(), 2000u);
  EXPECT_GE(lp->x.size(), 1000u);
  EXPECT_EQ(lp->declared_points, int(lp->x.size()));
  for (size_t i = 1; i < lp->x.size(); ++i) ASSERT_LT(lp->x[i - 1], lp->x[i]) << "x goes forward at point " << i;
  // The spike and the dip are both drawn, at their steps.
  const size_t top = std::min_element(lp->y.begin(), lp->y.end()) - lp->y.begin();
  const size_t bottom = std::max_element(lp->y.begin(), lp->y.end()) - lp->y.begin();
  const double x_unit = (loss->x_max - loss->x_min) / loss->width, y_unit = (loss->y_max - loss->y_min) / loss->height;
  EXPECT_NEAR(loss->value_at(lp->y[top]), 9.0, 0.006 * y_unit);
  EXPECT_NEAR(loss->step_at(lp->x[top]), 33333, 0.006 * x_unit);
  EXPECT_NEAR(loss->value_at(lp->y[bottom]), 0.01, 0.006 * y_unit);
  EXPECT_NEAR(loss->step_at(lp->x[bottom]), 77777, 0.006 * x_unit);
}

TEST(Report, ErrorsNameWhatIsMissing) {
  std::string d = fresh_temp_dir("report_errors");
  glint::testing::expect_error_naming([&] { glint::write_report(d + "/nope"); }, d + "/nope: not a directory");
  glint::testing::expect_error_naming([&] { glint::write_report(d); }, d + "/metrics.jsonl: not found");
  glint::ReportWriter writer(d);
  std::string message = writer.try_write();  // never throws
  EXPECT_NE(message.find("metrics.jsonl: not found"), std::string::npos) << message;
  write_file(d + "/metrics.jsonl", run_records(3));
  EXPECT_EQ(writer.try_write(), "");
  EXPECT_TRUE(fs::exists(d + "/report.html"));
}

// ---- the chart pieces ----

TEST(ReportChart, NiceAxesEndOnRoundTicks) {
  glint::ChartAxis a = glint::nice_axis(0.43, 2.4, 5);  // 0.39 a tick: 0.5
  EXPECT_DOUBLE_EQ(a.step, 0.5);
  EXPECT_DOUBLE_EQ(a.lo, 0.0);
  EXPECT_DOUBLE_EQ(a.hi, 2.5);
  EXPECT_EQ(a.ticks.size(), 6u);
  glint::ChartAxis b = glint::nice_axis(1.1, 1.9, 4);  // 0.2 a tick
  EXPECT_DOUBLE_EQ(b.step, 0.2);
  EXPECT_DOUBLE_EQ(b.lo, 1.0);
  EXPECT_DOUBLE_EQ(b.hi, 2.0);
  glint::ChartAxis steps = glint::nice_axis(1, 3, 10, /*integer=*/true);
  EXPECT_DOUBLE_EQ(steps.step, 1);
  glint::ChartAxis flat = glint::nice_axis(2e-4, 2e-4, 5);
  EXPECT_LT(flat.lo, 2e-4);
  EXPECT_GT(flat.hi, 2e-4);
  // Two values one rounding apart (a constant learning rate recomputed): a flat axis
  // with a few ticks, not steps below the values' resolution.
  glint::ChartAxis nearly = glint::nice_axis(0.01, 0.01 + 1.7e-18, 5);
  EXPECT_LT(nearly.lo, 0.01);
  EXPECT_GT(nearly.hi, 0.01);
  EXPECT_LE(nearly.ticks.size(), 12u);
}

TEST(ReportChart, TickLabelsAreShortAndDistinct) {
  glint::ChartAxis lr = glint::nice_axis(0, 2e-4, 5);
  EXPECT_EQ(glint::format_tick(2e-4, lr), "2.0e-4");
  EXPECT_EQ(glint::format_tick(0, lr), "0");
  glint::ChartAxis quarter = glint::nice_axis(0, 1, 4);  // step 0.25
  EXPECT_EQ(glint::format_tick(0.25, quarter), "0.25");
  glint::ChartAxis big = glint::nice_axis(0, 2500, 5);  // step 500
  EXPECT_EQ(glint::format_tick(1500, big), "1,500");
  glint::ChartAxis huge = glint::nice_axis(0, 3e7, 5);
  EXPECT_EQ(glint::format_tick(1e7, huge), "1.0e+7");
}

TEST(ReportChart, MinMaxDownsamplingKeepsEachBucketsExtremesInOrder) {
  std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8}, y = {5, 1, 9, 3, 4, 4, 0, 2};
  std::vector<double> ox, oy;
  glint::downsample_min_max(x, y, 4, &ox, &oy);  // 2 buckets of 4
  EXPECT_EQ(ox, (std::vector<double>{2, 3, 5, 7}));
  EXPECT_EQ(oy, (std::vector<double>{1, 9, 4, 0}));
  glint::downsample_min_max(x, y, 8, &ox, &oy);  // fits: unchanged
  EXPECT_EQ(oy, y);
}

}  // namespace
