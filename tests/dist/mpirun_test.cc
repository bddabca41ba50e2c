// The unchanged `glint train` under OpenMPI's mpirun (ranks from OMPI_COMM_WORLD_*,
// rendezvous at MASTER_ADDR:MASTER_PORT) equals the 1-process run.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "dist/launcher.h"
#include "test_util.h"

namespace {

using glint::testing::run_command;

std::vector<nlohmann::json> metrics(const std::string& path) { return glint::testing::read_jsonl(path); }

TEST(Mpirun, TrainUnderMpirunMatchesOneProcess) {
  int code;
  std::string which = run_command("command -v mpirun", &code);
  ASSERT_EQ(code, 0) << "mpirun is not installed (scripts/build.sh installs openmpi-bin)";
  std::string dir = glint::testing::fresh_temp_dir("mpirun");
  std::string train = std::string(GLINT_BINARY) +
                      " train --steps 3 --batch-size 8 --micro-batch-size 2 --eval-samples 0 --seed 4 --output ";
  std::string out = run_command(train + dir + "/w1", &code);
  ASSERT_EQ(code, 0) << out;
  std::string mpirun = "mpirun -n 2 --oversubscribe";
  if (geteuid() == 0) mpirun += " --allow-run-as-root";
  glint::ReservedPort reserved;
  int port = reserved.port();
  out = run_command("GLINT_DIST_TIMEOUT_SECONDS=60 " + mpirun + " -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=" +
                std::to_string(port) + " " + train + dir + "/w2 --fsdp",
            &code);
  ASSERT_EQ(code, 0) << out;
  auto a = metrics(dir + "/w1/metrics.jsonl"), b = metrics(dir + "/w2/metrics.jsonl");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u) << out;
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(b[s]["ranks"], 2);
    double la = a[s]["loss"].get<double>(), lb = b[s]["loss"].get<double>();
    EXPECT_LT(std::abs(la - lb), 1e-5 * std::abs(la)) << "step " << s + 1;
  }
}

}  // namespace
