// Faults of the disk under a running `glint train`, through the real binary: the disk
// fills while metrics are written, or when the adapter is saved over an earlier one;
// the model's weights are written to while they load. Each stops the run with an error
// naming the file and the system's reason, and leaves the files it had written whole.
// The full disks are small tmpfs mounts: root, as CI has.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "core/fs.h"
#include "dist/tiny_run.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using glint::testing::RunResult;
using glint::testing::SmallDisk;

// Every line of a JSONL file, each required to be one whole JSON object.
std::vector<nlohmann::json> whole_records(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(glint::read_file(path));
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << path << ": a partial line: " << line;
    if (!j.is_discarded()) out.push_back(j);
  }
  EXPECT_EQ(glint::read_file(path).back(), '\n') << path << " ends inside a line";
  return out;
}

TEST(DiskFaults, FullDiskWhileWritingMetricsStopsTheRunAndKeepsWholeRecords) {
  const std::string dir = glint::testing::fresh_temp_dir("full_metrics");
  const std::string model = glint::testing::make_model(dir);
  SmallDisk disk(dir + "/small", 1 << 20);
  ASSERT_TRUE(disk.ok()) << disk.why();
  const std::string run = dir + "/small/run";
  pid_t p = glint::testing::start(glint::testing::glint_bin() + " train --model " + model +
                                      " --steps 100000 --batch-size 2 --eval-samples 0 --log-every 1 --output " + run,
                                  dir + "/log");
  // The run is under way, then the disk fills up.
  auto t0 = std::chrono::steady_clock::now();
  auto size = [](const std::string& path) {
    std::error_code ec;
    auto n = fs::file_size(path, ec);
    return ec ? 0 : n;
  };
  while (size(run + "/metrics.jsonl") < 2000 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  disk.fill();
  const size_t before = whole_records(run + "/metrics.jsonl").size();
  int code = glint::testing::wait_for(p, 120);
  if (code == -1) ::kill(p, SIGKILL);
  const std::string log = glint::read_file(dir + "/log");
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find(run + "/metrics.jsonl: write failed (No space left on device); the records before it are kept"),
            std::string::npos)
      << log;
  // Whole records only, one per step from the first, none lost.
  auto records = whole_records(run + "/metrics.jsonl");
  ASSERT_GE(records.size(), before);
  for (size_t i = 0; i < records.size(); ++i) EXPECT_EQ(records[i].at("step").get<int64_t>(), int64_t(i) + 1);
  std::printf("disk full after %zu metrics records; the run stopped with %zu whole records\n", before, records.size());
}

TEST(DiskFaults, FullDiskWhileSavingTheAdapterKeepsTheEarlierAdapter) {
  const std::string dir = glint::testing::fresh_temp_dir("full_adapter");
  const std::string model = glint::testing::make_model(dir, 64, 64);
  const std::string train = glint::testing::glint_bin() + " train --model " + model +
                            " --steps 2 --batch-size 2 --eval-samples 0 --lora-r 8 --seed ";
  RunResult first = glint::testing::run(train + "1 --output " + dir + "/first");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // The second run's adapter directory is a disk holding the first run's adapter, with
  // less room left than a second copy of its weights needs.
  const std::string weights = dir + "/first/adapter/adapter_model.safetensors";
  const uint64_t weight_bytes = fs::file_size(weights);
  SmallDisk disk(dir + "/second/adapter", weight_bytes + (16 << 10));
  ASSERT_TRUE(disk.ok()) << disk.why();
  for (const char* f : {"adapter_model.safetensors", "adapter_config.json"})
    fs::copy_file(dir + "/first/adapter/" + f, dir + "/second/adapter/" + f);
  const std::string old_weights = glint::read_file(weights),
                    old_config = glint::read_file(dir + "/first/adapter/adapter_config.json");
  RunResult second = glint::testing::run(train + "2 --overwrite --output " + dir + "/second");
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_NE(second.output.find(dir + "/second/adapter/adapter_model.safetensors"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("No space left on device"), std::string::npos) << second.output;
  // The earlier adapter is there, byte for byte, and nothing else.
  EXPECT_EQ(glint::read_file(dir + "/second/adapter/adapter_model.safetensors"), old_weights);
  EXPECT_EQ(glint::read_file(dir + "/second/adapter/adapter_config.json"), old_config);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir + "/second/adapter")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"adapter_config.json", "adapter_model.safetensors"}));
  // The run's metrics, on another disk, are whole.
  EXPECT_EQ(whole_records(dir + "/second/metrics.jsonl").size(), 2u);
}

// A writer rewrites the model's weights in place, over and over, while the run loads
// them: the load stops with the file named instead of training on a mix of versions.
TEST(DiskFaults, WeightsWrittenWhileTheyLoadStopTheRun) {
  const std::string dir = glint::testing::fresh_temp_dir("changing_weights");
  const std::string model = glint::testing::make_model(dir, 256, 256, 1024);
  const std::string weights = model + "/model.safetensors";
  ASSERT_TRUE(fs::exists(weights));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the file times tick past init-model's
  // The same last byte written back every millisecond: the values stay, the file changes.
  pid_t writer = glint::testing::start(
      "sh -c 'while :; do tail -c 1 " + weights + " | dd of=" + weights +
          " bs=1 seek=$(( $(stat -c %s " + weights + ") - 1 )) conv=notrunc status=none; done'",
      dir + "/writer.log");
  RunResult r = glint::testing::run(glint::testing::glint_bin() + " train --model " + model +
                                    " --steps 1 --batch-size 2 --eval-samples 0 --output " + dir + "/run");
  ::kill(writer, SIGKILL);
  glint::testing::wait_for(writer, 10);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(weights + ": changed on disk while it was being read (it was written to)"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir + "/run/adapter")) << r.output;
}

}  // namespace
