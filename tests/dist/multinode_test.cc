// Several nodes: `glint launch --nnodes 2` on simulated nodes (network namespaces joined
// by veth pairs, tests/dist/netns.h), each node with its own address and loopback.
//  - EP x FSDP over 2 nodes x 2 ranks equals the 1-process run in float64, the EP groups
//    stay inside the nodes, and each rank reads only its share of the checkpoint (on a
//    path both nodes see).
//  - A node's link cut mid-run ends the job on both nodes within the distributed
//    timeout, each side naming what it lost.
// And on one machine: a rank stopped with SIGSTOP is named by the others.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <thread>

#include "core/fs.h"
#include "dist/netns.h"
#include "dist/tiny_run.h"
#include "io/safetensors.h"
#include "parallel/expert_parallel.h"
#include "test_util.h"

namespace {

using glint::testing::RunResult;
using glint::testing::SimulatedNodes;
namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Until `path` exists and is non-empty (a run's first metrics line), up to `seconds`.
bool wait_for_file(const std::string& path, double seconds) {
  auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < seconds) {
    std::error_code ec;
    if (fs::exists(path, ec) && fs::file_size(path, ec) > 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::unique_ptr<SimulatedNodes> make_nodes(int n) {
  std::string why;
  auto nodes = SimulatedNodes::create(n, &why);
  if (!nodes) ADD_FAILURE() << "simulated nodes: " << why << " (these tests need root, as CI has)";
  return nodes;
}

// `glint launch` of node k of 2 (2 ranks each) running `args`.
std::string node_launch(const SimulatedNodes& nodes, int k, int port, const std::string& args) {
  return nodes.on(k) + glint::testing::glint_bin() + " launch --nnodes " + std::to_string(nodes.size()) +
         " --node-rank " + std::to_string(k) + " --master-addr " + nodes.address(0) + " --master-port " +
         std::to_string(port) + " -n 2 -- " + glint::testing::glint_bin() + " " + args;
}

TEST(MultiNode, EpFsdpOverTwoNodesEqualsOneProcess) {
  const std::string dir = glint::testing::fresh_temp_dir("multinode_eq");
  const std::string model = glint::testing::make_model(dir, 32, 16);
  const std::string train = "train --model " + model +
                            " --steps 3 --batch-size 8 --micro-batch-size 1 --lr 1e-2 --seed 5 --dtype float64"
                            " --max-grad-norm 0.5 --warmup-steps 1 --full --eval-samples 0 --output ";
  RunResult one = glint::testing::run_glint(train + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.output;

  auto nodes = make_nodes(2);
  ASSERT_TRUE(nodes);
  auto t0 = std::chrono::steady_clock::now();
  pid_t p[2];
  for (int k = 0; k < 2; ++k)
    p[k] = glint::testing::start("GLINT_DIST_TIMEOUT_SECONDS=60 " +
                                     node_launch(*nodes, k, 29500, train + dir + "/two --fsdp --ep 2"),
                                 dir + "/node" + std::to_string(k) + ".log");
  int code[2];
  for (int k = 0; k < 2; ++k) code[k] = glint::testing::wait_for(p[k], 300);
  const double wall = seconds_since(t0);
  std::string log0 = glint::read_file(dir + "/node0.log"), log1 = glint::read_file(dir + "/node1.log");
  ASSERT_EQ(code[0], 0) << log0 << "\n--- node 1:\n" << log1;
  ASSERT_EQ(code[1], 0) << log1;
  std::printf("2 nodes x 2 ranks, --fsdp --ep 2: %.1f s\n", wall);

  // The layout: EP groups inside the nodes, FSDP across them.
  EXPECT_NE(log0.find("layout: 4 ranks on 2 nodes of 2; EP groups of 2 [0,1] [2,3] each inside a node"),
            std::string::npos)
      << log0;
  EXPECT_NE(log0.find("expert replicas over 2 ranks across nodes"), std::string::npos) << log0;
  EXPECT_NE(log0.find("FSDP shards the non-expert weights over all 4 ranks (across nodes)"), std::string::npos)
      << log0;

  // Every rank read only its share of the checkpoint, and together they read all of it.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log0, m, std::regex("weights read of the checkpoint's ([0-9.]+) MB:([^(]*)\\(")))
      << log0;
  const double total = std::stod(m[1]);
  std::string per_rank = m[2];
  double sum = 0;
  int ranks = 0;
  std::regex each("rank ([0-9]+) ([0-9.]+) MB");
  for (auto it = std::sregex_iterator(per_rank.begin(), per_rank.end(), each); it != std::sregex_iterator(); ++it) {
    const double mb = std::stod((*it)[2]);
    EXPECT_LT(mb, 0.6 * total) << "rank " << (*it)[1] << " read " << mb << " of " << total << " MB";
    sum += mb;
    ++ranks;
  }
  EXPECT_EQ(ranks, 4) << per_rank;
  EXPECT_GE(sum, total * 0.999) << per_rank;
  std::printf("checkpoint %.3f MB; ranks read%s\n", total, per_rank.c_str());

  // The same numbers as one process (float64: only the order of additions differs).
  auto a = glint::testing::read_jsonl(dir + "/one/metrics.jsonl"), b = glint::testing::read_jsonl(dir + "/two/metrics.jsonl");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  double worst = 0;
  for (size_t s = 0; s < 3; ++s)
    for (const char* k : {"loss", "grad_norm"}) {
      double d = glint::testing::rel(a[s][k].get<double>(), b[s][k].get<double>());
      worst = std::max(worst, d);
      EXPECT_LT(d, 1e-9) << k << " step " << s;
    }
  glint::SafetensorsFile wa(dir + "/one/model/model.safetensors"), wb(dir + "/two/model/model.safetensors");
  ASSERT_EQ(wa.keys(), wb.keys());
  for (const auto& key : wa.keys()) {
    at::Tensor x = wa.read(key).to(at::kDouble), y = wb.read(key).to(at::kDouble);
    double d = (x - y).norm().item<double>() / std::max(1e-300, x.norm().item<double>());
    worst = std::max(worst, d);
    EXPECT_LT(d, 1e-9) << key;
  }
  std::printf("worst relative difference to 1 process: %.2e\n", worst);
}

// A 2-node training job broken mid-run by `fault`; what each node's launcher did.
struct Broken {
  int code[2];
  double ended[2];  // seconds from the fault to the launcher's exit
  std::string log[2];
};

// `env`: the ranks' distributed timeouts.
Broken train_then_break(const std::string& name, const std::string& env,
                        const std::function<void(SimulatedNodes&)>& fault) {
  Broken b{};
  const std::string dir = glint::testing::fresh_temp_dir(name);
  const std::string model = glint::testing::make_model(dir, 32, 16);
  auto nodes = make_nodes(2);
  if (!nodes) return b;
  pid_t p[2];
  for (int k = 0; k < 2; ++k)
    p[k] = glint::testing::start(
        env + " " +
            node_launch(*nodes, k, 29500,
                        "train --model " + model + " --steps 100000 --batch-size 4 --eval-samples 0 --ep 2 --fsdp "
                        "--output " + dir + "/run"),
        dir + "/node" + std::to_string(k) + ".log");
  EXPECT_TRUE(wait_for_file(dir + "/run/metrics.jsonl", 120)) << glint::read_file(dir + "/node0.log");
  fault(*nodes);
  auto t0 = std::chrono::steady_clock::now();
  // Both launchers at once, each timed from the fault to its own exit.
  bool done[2] = {false, false};
  for (int k = 0; k < 2; ++k) b.code[k] = -1;
  while ((!done[0] || !done[1]) && seconds_since(t0) < 120) {
    for (int k = 0; k < 2; ++k)
      if (!done[k] && (b.code[k] = glint::testing::wait_for(p[k], 0.05)) != -1) {
        done[k] = true;
        b.ended[k] = seconds_since(t0);
      }
  }
  for (int k = 0; k < 2; ++k) {
    if (!done[k]) {
      ::kill(p[k], SIGKILL);
      b.ended[k] = seconds_since(t0);
    }
    b.log[k] = glint::read_file(dir + "/node" + std::to_string(k) + ".log");
  }
  std::printf("%s: node 0 ended %.1f s after the fault, node 1 %.1f s (%s)\n", name.c_str(), b.ended[0],
              b.ended[1], env.c_str());
  return b;
}

TEST(MultiNode, LinkCutEndsTheJobOnBothNodes) {
  const int timeout = 10;
  Broken b = train_then_break("link_cut", "GLINT_DIST_TIMEOUT_SECONDS=" + std::to_string(timeout), [](SimulatedNodes& nodes) {
    nodes.set_link(1, false);  // node 1's cable, mid-run
  });
  for (int k = 0; k < 2; ++k) {
    EXPECT_NE(b.code[k], 0) << b.log[k];
    EXPECT_NE(b.code[k], -1) << "node " << k << " did not end";
    // The bound: the timeout, ~3 s of heartbeat watching, a store timeout, the launcher's grace.
    EXPECT_LT(b.ended[k], timeout + 25.0) << "node " << k;
  }
  // Node 0 names node 1's ranks; node 1 names the store's host, rank 0 on node 0.
  EXPECT_NE(b.log[0].find("rank 2 and rank 3 (node 1) stopped answering"), std::string::npos) << b.log[0];
  EXPECT_NE(b.log[1].find("does not answer"), std::string::npos) << b.log[1];
  EXPECT_NE(b.log[1].find("rank 0 (node 0)"), std::string::npos) << b.log[1];
}

TEST(MultiNode, DeadNodeIsNamedByTheOther) {
  const int timeout = 10;
  Broken b = train_then_break("node_dies", "GLINT_DIST_TIMEOUT_SECONDS=" + std::to_string(timeout), [](SimulatedNodes& nodes) {
    // Every process of node 1, its launcher too: the machine is gone.
    RunResult r = glint::testing::run("ip netns pids " + nodes.namespace_of(1) + " | xargs -r kill -9");
    EXPECT_EQ(r.exit_code, 0) << r.output;
  });
  EXPECT_NE(b.code[0], 0) << b.log[0];
  EXPECT_NE(b.code[0], -1) << "node 0 did not end";
  EXPECT_LT(b.ended[0], timeout + 25.0);
  EXPECT_NE(b.log[0].find("rank 2 and rank 3 (node 1) stopped answering"), std::string::npos) << b.log[0];
}

// With the default 30-minute collective timeout, a cut link would hold the job until
// then; the heartbeat ends it after its own limit, on both sides.
TEST(MultiNode, HeartbeatEndsTheJobLongBeforeTheCollectiveTimeout) {
  const int heartbeat = 5;
  Broken b = train_then_break("heartbeat", "GLINT_DIST_TIMEOUT_SECONDS=1800 GLINT_HEARTBEAT_TIMEOUT_SECONDS=" +
                                               std::to_string(heartbeat),
                              [](SimulatedNodes& nodes) { nodes.set_link(1, false); });
  for (int k = 0; k < 2; ++k) {
    EXPECT_NE(b.code[k], 0) << b.log[k];
    EXPECT_NE(b.code[k], -1) << "node " << k << " did not end";
    // The limit, a beat or two, rank 0's three beats of notice, the launcher's grace.
    EXPECT_LT(b.ended[k], heartbeat + 20.0) << "node " << k;
  }
  EXPECT_NE(b.log[0].find("rank 2 and rank 3 (node 1) stopped answering: their heartbeat stood still for 5 s"),
            std::string::npos)
      << b.log[0];
  EXPECT_NE(b.log[0].find("[rank 1] glint: error: rank 1 (node 0): the job ends: rank 2 and rank 3 (node 1)"),
            std::string::npos)
      << b.log[0];
  EXPECT_NE(b.log[1].find("rank 0 (node 0)) does not answer"), std::string::npos) << b.log[1];
}

// The printed layout, from the rank numbering alone (node k holds ranks [k*4, k*4+4)).
TEST(MeshLayout, NamesWhereEachGroupRuns) {
  using glint::describe_mesh_layout;
  EXPECT_EQ(describe_mesh_layout(8, 4, 4, "contiguous", true),
            "layout: 8 ranks on 2 nodes of 4; EP groups of 4 [0,1,2,3] [4,5,6,7] each inside a node (all-to-all on "
            "the node's links); expert replicas over 2 ranks across nodes; FSDP shards the non-expert weights over "
            "all 8 ranks (across nodes), the experts over their replicas");
  EXPECT_EQ(describe_mesh_layout(8, 4, 4, "strided", false),
            "layout: 8 ranks on 2 nodes of 4; EP groups of 4 [0,2,4,6] [1,3,5,7], 2 of 2 spanning nodes "
            "(--ep-layout strided); expert replicas over 2 ranks inside a node");
  EXPECT_EQ(describe_mesh_layout(8, 2, 4, "contiguous", false),
            "layout: 8 ranks on 4 nodes of 2; EP groups of 4 [0,1,2,3] [4,5,6,7], 2 of 2 spanning nodes (an EP "
            "group of 4 does not fit in a node's 2 ranks); expert replicas over 2 ranks across nodes");
  EXPECT_EQ(describe_mesh_layout(4, 4, 1, "contiguous", false), "layout: 4 ranks on 1 node; data parallel over 4 ranks");
}

// A rank stopped by SIGSTOP: the others' next collective times out, and they name it.
TEST(DistFaults, StoppedRankIsNamedWithinTheTimeout) {
  const std::string dir = glint::testing::fresh_temp_dir("sigstop");
  const std::string train = glint::testing::glint_bin() + " train --steps 100000 --batch-size 6 --eval-samples 0 --output " + dir + "/run";
  // Rank 2 stops itself once rank 0 has written its first step.
  const std::string script = "if [ $RANK = 2 ]; then " + train + " & pid=$!; echo $pid > " + dir +
                             "/stopped.pid; for i in $(seq 300); do [ -s " + dir +
                             "/run/metrics.jsonl ] && break; sleep 0.1; done; kill -STOP $pid; wait $pid; "
                             "else exec " + train + "; fi";
  const int timeout = 8;
  auto t0 = std::chrono::steady_clock::now();
  RunResult r = glint::testing::run("GLINT_DIST_TIMEOUT_SECONDS=" + std::to_string(timeout) + " " +
                                    glint::testing::glint_bin() + " launch -n 3 -- bash -c '" + script + "'");
  const double wall = seconds_since(t0);
  // The stopped process outlives its shell (the launcher kills what it started).
  std::string pid = glint::read_file(dir + "/stopped.pid");
  if (!pid.empty()) ::kill(std::stoi(pid), SIGKILL);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 2 stopped answering"), std::string::npos) << r.output;
  EXPECT_LT(wall, 60.0) << r.output;
  std::printf("rank 2 stopped (SIGSTOP): the job ended after %.1f s in all (timeout %d s)\n", wall, timeout);
}

}  // namespace
