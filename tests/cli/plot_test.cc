// glint plot as a user runs it, and the page it writes as a browser draws it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/fs.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using glint::testing::run;
using glint::testing::run_glint;
using glint::testing::RunResult;

// A run directory with `n` steps (evaluations every 10th) and one tenant.
std::string make_run(const std::string& name, int n) {
  std::string d = glint::testing::fresh_temp_dir("plot_" + name);
  std::ofstream o(d + "/metrics.jsonl");
  for (int s = 1; s <= n; ++s) {
    o << "{\"step\":" << s << ",\"loss\":" << 3.0 / (1 + 0.05 * s) << ",\"grad_norm\":" << 1 + 0.1 * (s % 7)
      << ",\"lr\":" << 3e-4 * s / n << ",\"tokens\":1024,\"tokens_per_s\":" << 5000 + 10 * (s % 13)
      << ",\"elapsed_s\":" << s;
    if (s % 10 == 0) o << ",\"eval_loss\":" << 3.2 / (1 + 0.05 * s);
    o << "}\n";
  }
  fs::create_directories(d + "/support");
  std::ofstream t(d + "/support/metrics.jsonl");
  // A tenant's own records carry its learning rate and gradient norm, as a tenant run writes them.
  for (int s = 1; s <= n; ++s)
    t << "{\"step\":" << s << ",\"loss\":" << 2.0 / (1 + 0.03 * s) << ",\"grad_norm\":" << 0.5 + 0.1 * (s % 5)
      << ",\"lr\":" << 1e-4 * s / n << "}\n";
  return d;
}

TEST(ReportCli, PlotWritesTheReportIntoTheRunOrWhereAsked) {
  std::string d = make_run("cli", 40);
  RunResult r = run_glint("plot " + d);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(d + "/report.html"), std::string::npos) << r.output;
  std::string html = glint::read_file(d + "/report.html");
  EXPECT_NE(html.find("data-series=\"loss\""), std::string::npos);
  EXPECT_NE(html.find("data-series=\"tenant/support\""), std::string::npos);

  r = run_glint("plot " + d + " --output " + d + "/elsewhere.html");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(d + "/elsewhere.html"));
}

TEST(ReportCli, PlotErrorsNameTheMissingThing) {
  std::string d = glint::testing::fresh_temp_dir("plot_errors");
  RunResult r = run_glint("plot " + d + "/nope");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("glint: error: " + d + "/nope: not a directory"), std::string::npos) << r.output;
  r = run_glint("plot " + d);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(d + "/metrics.jsonl: not found"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(d + "/report.html"));
  r = run_glint("plot");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_glint("plot --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("report.html"), std::string::npos) << r.output;
}

// A multi-tenant run as a user starts it: the report draws each tenant's learning rate and
// gradient norm, named, and the run's records hold no tenant's values as the run's.
TEST(ReportCli, ATenantRunsReportNamesEachTenantsLrAndGradNorm) {
  std::string d = glint::testing::fresh_temp_dir("plot_tenants");
  std::ofstream data(d + "/ids.jsonl");
  for (int i = 0; i < 6; ++i)
    data << R"({"input_ids":[1,2,3,4,5,6,7,8],"labels":[-100,-100,-100,-100,5,6,7,8]})" << "\n";
  data.close();
  RunResult r = run_glint("train --steps 3 --batch-size 2 --tenant name=alpha,r=4,lr=1e-3,data=" + d +
                          "/ids.jsonl --tenant name=beta,r=8,lr=5e-4,data=" + d + "/ids.jsonl --output " + d + "/out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = glint::read_file(d + "/out/report.html");
  for (const char* series : {"tenant_lr/alpha", "tenant_lr/beta", "tenant_grad_norm/alpha", "tenant_grad_norm/beta"})
    EXPECT_NE(html.find(std::string("data-series=\"") + series + "\""), std::string::npos) << series;
  EXPECT_EQ(html.find("data-series=\"lr\""), std::string::npos);
  EXPECT_EQ(html.find("data-series=\"grad_norm\""), std::string::npos);
  for (const nlohmann::json& rec : glint::testing::read_jsonl(d + "/out/metrics.jsonl"))
    for (const char* k : {"lr", "grad_norm"}) EXPECT_FALSE(rec.contains(k)) << k << " in " << rec.dump();
  for (const char* t : {"alpha", "beta"})
    for (const nlohmann::json& rec : glint::testing::read_jsonl(d + "/out/" + t + "/metrics.jsonl"))
      for (const char* k : {"lr", "grad_norm"}) EXPECT_TRUE(rec.contains(k)) << t << ": " << rec.dump();
}

// elapsed_s is the run's: a resumed run goes on from the time its first process had
// reached, and within a process it moves with the wall clock (`time`).
TEST(ReportCli, ElapsedGoesOnAcrossAResume) {
  std::string d = glint::testing::fresh_temp_dir("plot_elapsed");
  const std::string out = d + "/out";
  RunResult r = run_glint("train --steps 10 --stop-after 8 --eval-samples 0 --batch-size 4 --output " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_glint("train --resume " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> recs = glint::testing::read_jsonl(out + "/metrics.jsonl");
  ASSERT_EQ(recs.size(), 10u);
  auto at = [&](int step, const char* k) { return recs[step - 1][k].get<double>(); };
  for (int s = 2; s <= 10; ++s) EXPECT_GE(at(s, "elapsed_s"), at(s - 1, "elapsed_s")) << "step " << s;
  // Across the resume it grew by no more than the wall clock did (the restart is not the
  // run's time), and after it by what the wall clock did.
  EXPECT_LE(at(9, "elapsed_s") - at(8, "elapsed_s"), at(9, "time") - at(8, "time") + 1e-3);
  EXPECT_NEAR(at(10, "elapsed_s") - at(9, "elapsed_s"), at(10, "time") - at(9, "time"), 0.05);
  EXPECT_GT(at(10, "elapsed_s"), at(8, "elapsed_s"));
}

// Headless Chromium draws the page: the screenshot is a real picture and the DOM it
// built holds the charts' paths. Skipped (saying so) where Debian's chromium is absent.
TEST(ReportBrowser, ChromiumDrawsThePage) {
  if (run("command -v chromium").exit_code != 0)
    GTEST_SKIP() << "chromium is not installed (apt-get install --no-install-recommends chromium): the page "
                    "was not drawn by a browser";
  std::string d = make_run("browser", 300);
  RunResult r = run_glint("plot " + d);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string flags = "timeout 120 chromium --headless --disable-gpu --no-sandbox --no-first-run "
                            "--disable-background-networking --disable-component-update --disable-sync "
                            "--user-data-dir=" + d + "/chromium-profile ";
  const std::string png = d + "/report.png";
  r = run(flags + "--screenshot=" + png + " --window-size=1200,2000 file://" + d + "/report.html");
  ASSERT_TRUE(fs::exists(png)) << r.output;
  EXPECT_EQ(glint::read_file(png).substr(0, 8), "\x89PNG\r\n\x1a\n");
  // The page of a run with no step yet (a header and one sentence) is the baseline: five
  // charts of lines, grids and tick labels make a PNG several times larger (measured:
  // about 26 KB against 170 KB).
  std::string empty = glint::testing::fresh_temp_dir("plot_browser_empty");
  std::ofstream(empty + "/metrics.jsonl").close();
  ASSERT_EQ(run_glint("plot " + empty).exit_code, 0);
  r = run(flags + "--screenshot=" + empty + "/report.png --window-size=1200,2000 file://" + empty + "/report.html");
  ASSERT_TRUE(fs::exists(empty + "/report.png")) << r.output;
  EXPECT_GT(fs::file_size(png), 3 * fs::file_size(empty + "/report.png"))
      << png << " is hardly bigger than the picture of an empty page";
  r = run(flags + "--dump-dom file://" + d + "/report.html 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // A tenant run draws the tenants' own learning rates and gradient norms.
  for (const char* series : {"loss", "eval_loss", "tenant_lr/support", "tenant_grad_norm/support", "tokens_per_s",
                             "tenant/support"})
    EXPECT_NE(r.output.find(std::string("data-series=\"") + series + "\""), std::string::npos) << series;
  EXPECT_NE(r.output.find("<svg"), std::string::npos);
}

}  // namespace
