// Multi-rank tests: real processes on 127.0.0.1 started through `glint launch`.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "dist/launcher.h"

#include "test_util.h"

namespace {

using glint::testing::run;
using glint::testing::RunResult;

// `glint launch -n N -- ARGS`, as a command line.
std::string launch_command(int n, const std::string& args) {
  return std::string(GLINT_BINARY) + " launch -n " + std::to_string(n) + " -- " + args;
}

// Binds a TCP socket to 127.0.0.1:port, with or without SO_REUSEADDR, and listens; the
// errno of the failure, 0 when it listens.
int listen_on(int port, bool reuse) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int on = reuse ? 1 : 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(uint16_t(port));
  int err = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::listen(fd, 1) == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

// The launcher's port stays taken for everything else while it picks it and the ranks
// start: a plain bind fails, and so does every bind(0) the kernel answers meanwhile;
// the store (SO_REUSEADDR, as libtorch's and libuv's listeners set) still listens on it.
TEST(DistLaunch, ReservedPortIsTakenForOthersButNotForTheStore) {
  glint::ReservedPort reserved;
  EXPECT_EQ(listen_on(reserved.port(), false), EADDRINUSE);
  for (int i = 0; i < 200; ++i) {
    glint::ReservedPort other;
    ASSERT_NE(other.port(), reserved.port());
  }
  EXPECT_EQ(listen_on(reserved.port(), true), 0);
}

TEST(DistComm, CollectivesMatchHandDerivedValues) {
  for (int w : {2, 3, 4}) {
    RunResult r = run(launch_command(w, std::string(GLINT_DIST_WORKER) + " comm"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    for (int i = 0; i < w; ++i)
      EXPECT_NE(r.output.find("[rank " + std::to_string(i) + "] comm ok on rank " + std::to_string(i)),
                std::string::npos)
          << r.output;
  }
}

TEST(DistComm, DeviceMeshAxesAreConsecutiveAndStridedGroups) {
  RunResult r = run(launch_command(4, std::string(GLINT_DIST_WORKER) + " mesh"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int i = 0; i < 4; ++i)
    EXPECT_NE(r.output.find("[rank " + std::to_string(i) + "] mesh ok"), std::string::npos) << r.output;
}

// Hand-derived permutation of a small expert-parallel dispatch (see the worker's case).
TEST(DistComm, ExpertParallelDispatchMatchesHandDerivedIndices) {
  RunResult r = run(launch_command(2, std::string(GLINT_DIST_WORKER) + " dispatch"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int i = 0; i < 2; ++i)
    EXPECT_NE(r.output.find("[rank " + std::to_string(i) + "] dispatch ok"), std::string::npos) << r.output;
}

TEST(DistLaunch, FailingRankStopsTheJobAndIsNamed) {
  RunResult r = run("GLINT_DIST_TIMEOUT_SECONDS=20 " + launch_command(3, std::string(GLINT_DIST_WORKER) + " die"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 exited with status 7"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 20) << r.output;
}

TEST(DistLaunch, KilledRankIsNamedWithItsSignal) {
  RunResult r = run(launch_command(3, "bash -c 'if [ $RANK = 2 ]; then kill -9 $$; fi; sleep 60'"));
  EXPECT_EQ(r.exit_code, 128 + 9) << r.output;
  EXPECT_NE(r.output.find("rank 2 was killed by signal 9"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 30);
}

TEST(DistLaunch, EnvironmentAndPrefixedOutput) {
  RunResult r = run(launch_command(2, "bash -c 'echo $RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE/$MASTER_ADDR'"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] 0/2/0/2/127.0.0.1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 1] 1/2/1/2/127.0.0.1"), std::string::npos) << r.output;
  RunResult bad = run(std::string(GLINT_BINARY) + " launch -n 0 -- true");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("-n"), std::string::npos) << bad.output;
}

// Node 1 of 2: its ranks are 2 and 3 of 4, numbered node by node as torchrun does.
TEST(DistLaunch, SecondNodeOfTwoGetsTorchrunsEnvironment) {
  RunResult r = run(std::string(GLINT_BINARY) +
                    " launch --nnodes 2 --node-rank 1 --master-addr 10.1.2.3 -n 2 -- bash -c "
                    "'echo $RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE/$GROUP_RANK/$MASTER_ADDR:$MASTER_PORT'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 2] 2/4/0/2/1/10.1.2.3:29500"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 3] 3/4/1/2/1/10.1.2.3:29500"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("node 1 of 2: ranks 2-3 of 4"), std::string::npos) << r.output;
  // A failing rank is named with its node.
  RunResult f = run(std::string(GLINT_BINARY) +
                    " launch --nnodes 2 --node-rank 1 --master-addr 10.1.2.3 -n 2 -- bash -c 'exit $LOCAL_RANK'");
  EXPECT_EQ(f.exit_code, 1) << f.output;
  EXPECT_NE(f.output.find("glint launch: rank 3 (node 1) exited with status 1"), std::string::npos) << f.output;
  // Bad node flags.
  for (const auto& [flags, word] : std::vector<std::pair<std::string, std::string>>{
           {"--nnodes 2 --node-rank 2 --master-addr 10.1.2.3", "--node-rank 2 is not in [0, 2)"},
           {"--nnodes 0", "--nnodes must be at least 1"},
           {"--nnodes 2 --node-rank 1", "--master-addr must be an address every node reaches"}}) {
    RunResult b = run(std::string(GLINT_BINARY) + " launch " + flags + " -n 1 -- true");
    EXPECT_NE(b.exit_code, 0) << flags;
    EXPECT_NE(b.output.find(word), std::string::npos) << flags << ": " << b.output;
  }
}

TEST(DistLaunch, TakenPortAndWorldSizeMismatchAreClearErrors) {
  glint::ReservedPort reserved;
  int port = reserved.port();
  // Two rank-0 processes on one port: the second cannot host the store.
  std::string worker = std::string(GLINT_DIST_WORKER) + " comm";
  std::string env = "GLINT_DIST_TIMEOUT_SECONDS=5 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port);
  RunResult r = run("(" + env + " RANK=0 WORLD_SIZE=2 " + worker + " & sleep 1; " + env +
                    " RANK=0 WORLD_SIZE=2 " + worker + "; echo second=$?; wait)");
  EXPECT_NE(r.output.find("second=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is the port taken?"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did every rank start"), std::string::npos) << r.output;
  // A rank outside the world size.
  RunResult m = run(env + " RANK=3 WORLD_SIZE=2 " + worker);
  EXPECT_EQ(m.exit_code, 1) << m.output;
  EXPECT_NE(m.output.find("rank 3 is not below the world size 2"), std::string::npos) << m.output;
  // Nobody hosts the store: the timeout ends the wait with a message.
  glint::ReservedPort unused;
  RunResult u = run("GLINT_DIST_TIMEOUT_SECONDS=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                    std::to_string(unused.port()) + " RANK=1 WORLD_SIZE=2 " + worker);
  EXPECT_EQ(u.exit_code, 1) << u.output;
  EXPECT_NE(u.output.find("rendezvous"), std::string::npos) << u.output;
  EXPECT_LT(u.seconds, 30);
}

}  // namespace

namespace {

// A training rank killed with SIGKILL in the middle of a run: `glint launch` stops the
// job and names the rank; without a launcher the surviving rank fails on its own.
TEST(DistLaunch, TrainingRankKilledMidRunEndsTheJob) {
  const std::string out = glint::testing::fresh_temp_dir("kill_run");
  std::string train = std::string(GLINT_BINARY) + " train --steps 100000 --eval-samples 0 --output " + out;
  // Mid-run: once rank 0 has written its first step (both ranks are in the job).
  auto once_training = [](const std::string& dir) {
    return "for i in $(seq 300); do [ -s " + dir + "/metrics.jsonl ] && break; sleep 0.1; done; ";
  };
  std::string script = "if [ $RANK = 1 ]; then " + train + " & pid=$!; " + once_training(out) +
                       "kill -9 $pid; wait $pid; exit $?; else exec " + train + "; fi";
  RunResult r = run("GLINT_DIST_TIMEOUT_SECONDS=20 " + launch_command(2, "bash -c '" + script + "'"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("glint launch: rank 1 exited with status 137"), std::string::npos) << r.output;
  // Bounded: rank 0's collective fails on the closed connection, it watches the
  // heartbeats for 3 s to name the lost rank, and exits (a loaded 2-core machine has
  // taken 32 s for the whole run).
  EXPECT_LT(r.seconds, 60) << r.output;

  // No launcher: rank 0 notices the lost peer in its next collective.
  glint::ReservedPort reserved;
  int port = reserved.port();
  std::string env = "GLINT_DIST_TIMEOUT_SECONDS=10 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                    " WORLD_SIZE=2 ";
  RunResult solo = run("(RANK=0 " + env + train + "_b0 & p0=$!; RANK=1 " + env + train +
                       "_b1 > /dev/null 2>&1 & p1=$!; " + once_training(out + "_b0") + "kill -9 $p1; wait $p0)");
  std::string tail = solo.output.substr(solo.output.size() > 2000 ? solo.output.size() - 2000 : 0);
  EXPECT_EQ(solo.exit_code, 1) << tail;
  EXPECT_NE(solo.output.find("glint: error: rank 0:"), std::string::npos) << tail;
  // Its heartbeat stood still: the lost rank is named.
  EXPECT_NE(solo.output.find("rank 1 stopped answering"), std::string::npos) << tail;
  EXPECT_LT(solo.seconds, 40);
}

}  // namespace
