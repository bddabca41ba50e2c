// Checkpoints and resume through the real binary and `glint launch`: a run stopped at
// step 3 of 6 and resumed equals the uninterrupted run (float64: every loss, gradient
// norm and trained tensor; bit for bit on the same mesh, to rounding on another), on
// every mesh and with tenants. Then the faults: corrupted, incomplete and mismatched
// checkpoints are refused; a rank killed during a save or a full disk leaves `latest`
// at a complete checkpoint; SIGTERM saves and exits 0; a second signal exits at once.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/fs.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "tiny_run.h"

namespace {

namespace fs = std::filesystem;
using glint::testing::glint_bin;
using glint::testing::launch;
using glint::testing::make_data;
using glint::testing::make_model;
using glint::testing::read_jsonl;
using glint::testing::rel;
using glint::testing::RunResult;
using glint::testing::start;
using glint::testing::wait_for;


// Largest relative difference ||a - b|| / ||a|| over the tensors of two files with the
// same keys.
double tensor_difference(const std::string& a_path, const std::string& b_path) {
  glint::SafetensorsFile a(a_path), b(b_path);
  EXPECT_EQ(a.keys(), b.keys()) << a_path;
  double worst = 0;
  for (const auto& k : a.keys()) {
    if (!b.contains(k)) continue;
    at::Tensor x = a.read(k).to(at::kDouble), y = b.read(k).to(at::kDouble);
    EXPECT_EQ(x.sizes(), y.sizes()) << k;
    worst = std::max(worst, (x - y).norm().item<double>() / std::max(1e-300, x.norm().item<double>()));
  }
  return worst;
}

// The step of the newest checkpoint in RUN/checkpoints that has its manifest (0: none).
int64_t newest_complete_step(const std::string& run) {
  int64_t newest = 0;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints")) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) == 0 && n.find('.') == std::string::npos && fs::exists(e.path() / "manifest.json"))
      newest = std::max<int64_t>(newest, std::stoll(n.substr(5)));
  }
  return newest;
}

struct Mesh {
  int ranks;
  std::string flags;
};

struct ResumeVariant {
  std::string name;
  std::string training;  // "--full", "--lora-r 4" or tenant specs
  Mesh before, after;    // the mesh stopped at step 3, the mesh that resumes
  double tol;            // relative; 0: bit for bit
  friend void PrintTo(const ResumeVariant& v, std::ostream* os) { *os << v.name; }
};

class Resume : public ::testing::TestWithParam<ResumeVariant> {};

TEST_P(Resume, StoppedAndResumedEqualsUninterrupted) {
  const ResumeVariant& v = GetParam();
  std::string dir = glint::testing::fresh_temp_dir("resume_" + v.name);
  std::string model = make_model(dir);
  std::string training = v.training;
  const bool tenants = training.find("--tenant") != std::string::npos;
  if (tenants) {
    make_data(dir + "/a.jsonl", 24, 1);
    make_data(dir + "/b.jsonl", 20, 2);
    make_data(dir + "/a_eval.jsonl", 6, 3);
    for (const char* f : {"a.jsonl", "b.jsonl", "a_eval.jsonl"}) {
      size_t at;
      while ((at = training.find(std::string("@") + f)) != std::string::npos)
        training.replace(at, std::strlen(f) + 1, dir + "/" + f);
    }
  }
  const std::string common = "train --model " + model +
                             " --steps 6 --batch-size 8 --micro-batch-size 1 --lr 1e-2 --seed 5 --dtype float64"
                             " --max-grad-norm 0.5 --warmup-steps 1 --eval-samples 0 --save-every 3 --eval-every 2 " +
                             training;
  RunResult whole = launch(v.before.ranks, common + " " + v.before.flags + " --output " + dir + "/whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  RunResult first = launch(v.before.ranks, common + " " + v.before.flags + " --stop-after 3 --output " + dir + "/run");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("glint train --resume " + dir + "/run"), std::string::npos) << first.output;
  ASSERT_TRUE(fs::exists(dir + "/run/checkpoints/step-3/manifest.json"));
  EXPECT_FALSE(fs::exists(dir + "/run/adapter")) << "a stopped run writes no final adapter";
  // The resumed run takes the run's own settings (config.toml); only the mesh changes.
  RunResult second = launch(v.after.ranks, "train --resume " + dir + "/run " + v.after.flags);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;

  auto compare_metrics = [&](const std::string& want_path, const std::string& got_path, size_t steps) {
    auto want = read_jsonl(want_path), got = read_jsonl(got_path);
    ASSERT_EQ(want.size(), steps) << want_path;
    ASSERT_EQ(got.size(), steps) << got_path;
    for (size_t s = 0; s < steps; ++s) {
      EXPECT_EQ(got[s]["step"], want[s]["step"]);
      for (const char* k : {"loss", "grad_norm", "lr", "eval_loss"}) {
        if (!want[s].contains(k)) continue;
        ASSERT_TRUE(got[s].contains(k)) << k << " step " << s + 1;
        double a = want[s][k].get<double>(), b = got[s][k].get<double>();
        if (v.tol == 0) EXPECT_EQ(a, b) << k << " step " << s + 1 << " " << got_path;
        else EXPECT_LT(rel(a, b), v.tol) << k << " step " << s + 1 << ": " << a << " vs " << b;
      }
    }
  };
  compare_metrics(dir + "/whole/metrics.jsonl", dir + "/run/metrics.jsonl", 6);
  std::vector<std::string> outputs;
  if (tenants) {
    for (const char* t : {"a", "b"}) {  // b trains 5 steps
      outputs.push_back(std::string("/") + t + "/adapter/adapter_model.safetensors");
      compare_metrics(dir + "/whole/" + t + "/metrics.jsonl", dir + "/run/" + t + "/metrics.jsonl", t[0] == 'a' ? 6 : 5);
    }
  } else {
    outputs.push_back(training.find("--full") != std::string::npos ? "/model/model.safetensors"
                                                                   : "/adapter/adapter_model.safetensors");
  }
  for (const auto& o : outputs) {
    double d = tensor_difference(dir + "/whole" + o, dir + "/run" + o);
    if (v.tol == 0) EXPECT_EQ(d, 0.0) << o;
    else EXPECT_LT(d, v.tol) << o;
    std::printf("%s: %s relative difference %.2e\n", v.name.c_str(), o.c_str(), d);
  }
  // The step-6 checkpoints hold the same state too (parameters and AdamW moments).
  glint::SafetensorsFile want_state(dir + "/whole/checkpoints/step-6/rank-00000.safetensors");
  EXPECT_FALSE(want_state.keys().empty());
}

const std::string kTenants =
    "--tenant name=a,r=4,data=@a.jsonl,eval=@a_eval.jsonl,batch=4 --tenant name=b,r=2,data=@b.jsonl,batch=4,steps=5";

INSTANTIATE_TEST_SUITE_P(
    Meshes, Resume,
    ::testing::Values(ResumeVariant{"One", "--lora-r 4", {1, ""}, {1, ""}, 0},
                      ResumeVariant{"Ddp", "--lora-r 4", {2, ""}, {2, ""}, 0},
                      ResumeVariant{"FsdpFull", "--full", {2, "--fsdp"}, {2, ""}, 0},
                      ResumeVariant{"Ep", "--lora-r 4", {2, "--ep 2"}, {2, ""}, 0},
                      ResumeVariant{"EpFsdpLora", "--lora-r 4", {4, "--ep 2 --fsdp"}, {4, ""}, 0},
                      ResumeVariant{"EpFsdpFull", "--full", {4, "--ep 2 --fsdp"}, {4, ""}, 0},
                      ResumeVariant{"Tenants", kTenants, {2, "--ep 2"}, {2, ""}, 0},
                      // Another mesh: the state is resharded from the manifest; a mesh
                      // changes the order of additions only (float64 rounding).
                      ResumeVariant{"ReshardFullEp2FsdpToEp4", "--full", {2, "--ep 2 --fsdp"}, {4, "--ep 4"}, 1e-9},
                      ResumeVariant{"ReshardLoraEpFsdpToOne", "--lora-r 4", {4, "--ep 2 --fsdp"}, {1, "--ep 1 --no-fsdp"}, 1e-9},
                      ResumeVariant{"ReshardTenantsToFour", kTenants, {2, ""}, {4, "--ep 2 --fsdp"}, 1e-9}));

// A short LoRA run stopped at step 2 of 4, for the fault tests.
struct Stopped {
  std::string dir, model, run;
};
Stopped stopped_run(const std::string& name, int ranks = 2) {
  Stopped s;
  s.dir = glint::testing::fresh_temp_dir(name);
  s.model = make_model(s.dir);
  s.run = s.dir + "/run";
  RunResult r = launch(ranks, "train --model " + s.model +
                                  " --steps 4 --batch-size 4 --dtype float64 --eval-samples 0 --lora-r 4 --save-every 2"
                                  " --stop-after 2 --output " + s.run);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return s;
}

void expect_refused(const RunResult& r, const std::vector<std::string>& words) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  for (const auto& w : words) EXPECT_NE(r.output.find(w), std::string::npos) << "no '" << w << "' in:\n" << r.output;
}

TEST(ResumeFaults, FlippedByteIsRefused) {
  Stopped s = stopped_run("resume_flipped");
  const std::string file = s.run + "/checkpoints/step-2/rank-00001.json";
  std::string text = glint::read_file(file);
  size_t at = text.find("\"rank\":1");
  ASSERT_NE(at, std::string::npos) << text;
  text[at + 7] = '2';  // same size, one byte differs
  std::ofstream(file, std::ios::binary) << text;
  expect_refused(launch(2, "train --resume " + s.run), {"rank-00001.json", "checksum", "corrupted"});
  // A tensor byte too, in the safetensors data.
  Stopped t = stopped_run("resume_flipped_tensor");
  const std::string tensors = t.run + "/checkpoints/step-2/rank-00000.safetensors";
  std::fstream f(tensors, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-3, std::ios::end);
  char c;
  f.get(c);
  f.seekp(-3, std::ios::end);
  f.put(char(c ^ 0x10));
  f.close();
  expect_refused(launch(2, "train --resume " + t.run), {"rank-00000.safetensors", "checksum"});
  expect_refused(launch(1, "train --resume " + t.run + " --ep 1"), {"rank-00000.safetensors", "checksum"});
}

TEST(ResumeFaults, IncompleteAndMismatchedCheckpointsAreRefused) {
  Stopped s = stopped_run("resume_incomplete");
  // Another adapter rank, another model: every difference is named.
  expect_refused(launch(2, "train --resume " + s.run + " --lora-r 8"), {"another model or training setup", "lora.r: saved 4, now 8"});
  expect_refused(launch(2, "train --resume " + s.run + " --full"), {"training: saved \"lora\", now \"full\""});
  expect_refused(launch(2, "train --resume " + s.run + " --dtype float32"), {"dtype"});
  // An end before the checkpoint's step: refused.
  expect_refused(launch(2, "train --resume " + s.run + " --steps 1"), {"is at step 2, past the run's --steps 1"});
  // A stop at or before the checkpoint's step would never come: refused, not run on.
  expect_refused(launch(2, "train --resume " + s.run + " --stop-after 2"), {"is at step 2", "--stop-after 2 is not after it"});
  // The end at the checkpoint's step: nothing is left to train, and the run's outputs
  // are written from it.
  RunResult finished = launch(2, "train --resume " + s.run + " --steps 2");
  EXPECT_EQ(finished.exit_code, 0) << finished.output;
  EXPECT_NE(finished.output.find("nothing is left to train"), std::string::npos) << finished.output;
  EXPECT_TRUE(fs::exists(s.run + "/adapter/adapter_model.safetensors"));
  // A missing rank file, then a truncated one.
  fs::rename(s.run + "/checkpoints/step-2/rank-00001.safetensors", s.dir + "/moved");
  expect_refused(launch(2, "train --resume " + s.run), {"rank-00001.safetensors is missing", "incomplete"});
  fs::rename(s.dir + "/moved", s.run + "/checkpoints/step-2/rank-00001.safetensors");
  fs::resize_file(s.run + "/checkpoints/step-2/rank-00001.safetensors",
                  fs::file_size(s.run + "/checkpoints/step-2/rank-00001.safetensors") - 1);
  expect_refused(launch(2, "train --resume " + s.run), {"rank-00001.safetensors", "truncated"});
  // No checkpoint at all; a directory that is none.
  expect_refused(launch(1, "train --resume " + s.dir), {"neither a run directory"});
  fs::remove(s.run + "/checkpoints/latest");
  expect_refused(launch(1, "train --resume " + s.run), {"no complete checkpoint"});
}

TEST(ResumeFaults, ResumingNeverWritesOverACheckpoint) {
  Stopped s = stopped_run("resume_overwrite");
  RunResult more = launch(2, "train --resume " + s.run + " --stop-after 3 --save-every 1");
  ASSERT_EQ(more.exit_code, 0) << more.output;
  ASSERT_TRUE(fs::exists(s.run + "/checkpoints/step-3/manifest.json"));
  const std::string step2 = s.run + "/checkpoints/step-2";
  const auto before = fs::last_write_time(step2 + "/manifest.json");
  // From step 2 in the same run directory, step 3 would be written again: refused.
  expect_refused(launch(2, "train --resume " + step2), {"later checkpoint (step-3)", "--output"});
  // Branching into a new directory is fine, and the source stays as it was.
  RunResult branch = launch(2, "train --resume " + step2 + " --output " + s.dir + "/branch");
  ASSERT_EQ(branch.exit_code, 0) << branch.output;
  EXPECT_TRUE(fs::exists(s.dir + "/branch/adapter/adapter_model.safetensors"));
  EXPECT_EQ(fs::last_write_time(step2 + "/manifest.json"), before);
  EXPECT_TRUE(fs::exists(s.run + "/checkpoints/step-3/manifest.json"));
}

TEST(ResumeFaults, KeepLastKeepsTheNewest) {
  std::string dir = glint::testing::fresh_temp_dir("resume_keep_last");
  std::string model = make_model(dir);
  RunResult r = launch(2, "train --model " + model +
                              " --steps 5 --batch-size 4 --dtype float64 --eval-samples 0 --lora-r 4 --save-every 1"
                              " --keep-last 2 --output " + dir + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir + "/run/checkpoints")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-4", "step-5"}));
  EXPECT_EQ(glint::read_file(dir + "/run/checkpoints/latest"), "step-5\n");
}

size_t lines_in(const std::string& path) { return read_jsonl(path).size(); }

TEST(ResumeFaults, SigtermSavesAndExitsZeroAndResumeContinues) {
  std::string dir = glint::testing::fresh_temp_dir("resume_sigterm");
  std::string model = make_model(dir);
  const std::string run = dir + "/run";
  pid_t pid = start("GLINT_DIST_TIMEOUT_SECONDS=60 " + glint_bin() + " launch -n 2 -- " + glint_bin() +
                        " train --model " + model +
                        " --steps 100000 --batch-size 4 --dtype float64 --eval-samples 0 --lora-r 4 --output " + run,
                    dir + "/log");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (lines_in(run + "/metrics.jsonl") < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GE(lines_in(run + "/metrics.jsonl"), 3u) << glint::read_file(dir + "/log");
  ::kill(pid, SIGTERM);
  int code = wait_for(pid, 120);
  std::string log = glint::read_file(dir + "/log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("stopped by SIGTERM"), std::string::npos) << log;
  EXPECT_NE(log.find("glint train --resume " + run), std::string::npos) << log;
  auto metrics = read_jsonl(run + "/metrics.jsonl");
  const int64_t k = metrics.back()["step"].get<int64_t>();
  EXPECT_EQ(glint::read_file(run + "/checkpoints/latest"), "step-" + std::to_string(k) + "\n");
  RunResult more = launch(2, "train --resume " + run + " --steps " + std::to_string(k + 2));
  ASSERT_EQ(more.exit_code, 0) << more.output;
  metrics = read_jsonl(run + "/metrics.jsonl");
  ASSERT_EQ(int64_t(metrics.size()), k + 2);
  for (int64_t s = 0; s < k + 2; ++s) EXPECT_EQ(metrics[size_t(s)]["step"].get<int64_t>(), s + 1);
  EXPECT_TRUE(fs::exists(run + "/adapter/adapter_model.safetensors"));
}

// Whether signal `sig` left `pid`'s pending sets (thread and process: SigPnd, ShdPnd in
// /proc/PID/status) within `seconds`: its handler has run.
bool wait_until_delivered(pid_t pid, int sig, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  const uint64_t bit = uint64_t(1) << (sig - 1);
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    uint64_t pending = 0;
    while (std::getline(status, line))
      if (line.rfind("SigPnd:", 0) == 0 || line.rfind("ShdPnd:", 0) == 0) pending |= std::stoull(line.substr(7), nullptr, 16);
    if (!(pending & bit)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST(ResumeFaults, SecondSignalExitsAtOnce) {
  std::string dir = glint::testing::fresh_temp_dir("resume_second_signal");
  std::string model = make_model(dir, 64, 512);  // steps long enough for both signals to land in one
  const std::string run = dir + "/run";
  pid_t pid = start(glint_bin() + " train --model " + model +
                        " --steps 100000 --batch-size 4 --dtype float64 --eval-samples 0 --lora-r 4 --output " + run,
                    dir + "/log");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (lines_in(run + "/metrics.jsonl") < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // Two deliveries, not one pending signal: the second is sent once the first has left the
  // process's pending set (a loaded machine may not run the process for milliseconds).
  ::kill(pid, SIGINT);
  EXPECT_TRUE(wait_until_delivered(pid, SIGINT, 30)) << "the first SIGINT stayed pending for 30 s";
  ::kill(pid, SIGINT);
  int code = wait_for(pid, 60);
  EXPECT_EQ(code, 128 + SIGINT) << glint::read_file(dir + "/log");
  // Whatever it was doing, no complete-looking checkpoint is left half written.
  if (fs::exists(run + "/checkpoints"))
    for (const auto& e : fs::directory_iterator(run + "/checkpoints")) {
      const std::string n = e.path().filename().string();
      if (n.rfind("step-", 0) == 0) EXPECT_TRUE(fs::exists(e.path() / "manifest.json")) << n;
    }
}

// A rank killed while checkpoints are written: `latest` names a complete checkpoint,
// which loads; the partial directory is ignored.
TEST(ResumeFaults, RankKilledDuringASaveLeavesTheLatestComplete) {
  std::string dir = glint::testing::fresh_temp_dir("resume_kill");
  // Larger experts: each save writes tens of MB, so that saves take a while.
  std::string model = make_model(dir, 64, 512);
  const std::string run = dir + "/run";
  pid_t pid = start("GLINT_DIST_TIMEOUT_SECONDS=20 " + glint_bin() + " launch -n 2 -- " + glint_bin() +
                        " train --model " + model +
                        " --steps 100000 --batch-size 2 --dtype float64 --eval-samples 0 --full --save-every 1 "
                        "--keep-last 3 --output " + run,
                    dir + "/log");
  // Kill rank 1 the moment a save is under way (a .partial directory exists) after the
  // first complete checkpoint.
  bool mid_save = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline && !mid_save) {
    if (fs::exists(run + "/checkpoints/latest") && fs::exists(run + "/checkpoints"))
      for (const auto& e : fs::directory_iterator(run + "/checkpoints")) {
        const std::string n = e.path().filename().string();
        if (n.size() > 8 && n.compare(n.size() - 8, 8, ".partial") == 0) mid_save = true;
      }
    if (!mid_save) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_TRUE(mid_save) << "no save seen under way\n" << glint::read_file(dir + "/log");
  RunResult ranks = glint::testing::run("pgrep -P " + std::to_string(pid));
  std::vector<pid_t> children;
  std::istringstream in(ranks.output);
  for (pid_t p; in >> p;) children.push_back(p);
  ASSERT_EQ(children.size(), 2u) << ranks.output;
  ::kill(children[1], SIGKILL);
  int code = wait_for(pid, 120);
  std::string log = glint::read_file(dir + "/log");
  EXPECT_NE(code, 0) << log;
  std::string latest = glint::read_file(run + "/checkpoints/latest");
  latest.pop_back();
  ASSERT_TRUE(fs::exists(run + "/checkpoints/" + latest + "/manifest.json")) << latest;
  // The kill may land after a save's rename and before `latest` moved: that checkpoint is
  // complete too, and the newest, and resume takes it. It loads (checksums verified).
  const int64_t k = newest_complete_step(run);
  ASSERT_GE(k, std::stoll(latest.substr(5)));
  RunResult again = launch(2, "train --resume " + run + " --stop-after " + std::to_string(k + 1));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("/checkpoints/step-" + std::to_string(k) + " at step " + std::to_string(k)),
            std::string::npos)
      << again.output;
  std::printf("killed rank 1 during a save (latest: %s, newest complete: step-%lld)\n", latest.c_str(), (long long)k);
}

// A save that runs out of space fails with the system's reason, stops the job and
// leaves the previous checkpoint intact. Needs a small tmpfs: root (CI runs as root).
TEST(ResumeFaults, FullDiskFailsClearlyAndKeepsThePreviousCheckpoint) {
  std::string dir = glint::testing::fresh_temp_dir("resume_full_disk");
  std::string model = make_model(dir, 64, 64);  // a checkpoint of ~1.5 MB
  const std::string small = dir + "/small";
  glint::testing::SmallDisk disk(small, 6 << 20);
  ASSERT_TRUE(disk.ok()) << disk.why();
  const std::string run = small + "/run";
  RunResult r = launch(2, "train --model " + model +
                              " --steps 50 --batch-size 2 --dtype float64 --eval-samples 0 --full --fsdp --save-every 1"
                              " --output " + run);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(run + "/checkpoints/latest")) << r.output;
  std::string latest = glint::read_file(run + "/checkpoints/latest");
  latest.pop_back();
  for (const auto& e : fs::directory_iterator(run + "/checkpoints")) {
    const std::string n = e.path().filename().string();
    EXPECT_TRUE(n == "latest" || fs::exists(e.path() / "manifest.json")) << n << " left behind";
  }
  // The previous checkpoint loads (checksums verified), into a run directory elsewhere.
  const int64_t k = std::stoll(latest.substr(5));
  ASSERT_EQ(newest_complete_step(run), k);
  RunResult again = launch(2, "train --resume " + run + " --stop-after " + std::to_string(k + 1) + " --output " + dir +
                                  "/elsewhere");
  EXPECT_EQ(again.exit_code, 0) << again.output;
}

}  // namespace
