// Simulated nodes for multi-node tests: Linux network namespaces, one per "node", each
// joined by a veth pair to a bridge in the host namespace, with its own address
// 10.77.0.(k+1)/24 and its own loopback. Processes started in node k see only that
// node's network; the file system is shared (a path every node sees, as a cluster's
// shared storage). Needs root and iproute2 (CI runs as root).
//
// Names carry the test process's pid, so concurrent tests do not collide; namespaces
// and bridges left by a test process that died are removed by the next one.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace glint::testing {

class SimulatedNodes {
 public:
  // Makes `n` nodes, or returns null with the reason in *why_not (not root, no iproute2).
  static std::unique_ptr<SimulatedNodes> create(int n, std::string* why_not) {
    remove_stale();
    std::unique_ptr<SimulatedNodes> nodes(new SimulatedNodes(n));
    std::string out;
    if (!nodes->sh("ip link add " + nodes->bridge_ + " type bridge && ip link set " + nodes->bridge_ + " up", &out)) {
      *why_not = "cannot create a bridge (needs root and iproute2): " + out;
      return nullptr;
    }
    for (int k = 0; k < n; ++k) {
      const std::string ns = nodes->ns(k), host = nodes->host_veth(k);
      std::string cmd = "ip netns add " + ns + " && ip link add " + host + " type veth peer name eth0 netns " + ns +
                        " && ip link set " + host + " master " + nodes->bridge_ + " up && ip -n " + ns +
                        " addr add " + nodes->address(k) + "/24 dev eth0 && ip -n " + ns +
                        " link set eth0 up && ip -n " + ns + " link set lo up";
      if (!nodes->sh(cmd, &out)) {
        *why_not = "cannot create node " + std::to_string(k) + ": " + out;
        return nullptr;
      }
    }
    return nodes;
  }

  // Kills every process still inside a node, then removes the namespaces, veths and
  // the bridge (also when the test failed half-way).
  ~SimulatedNodes() {
    for (int k = 0; k < n_; ++k) {
      std::string out;
      sh("ip netns pids " + ns(k) + " | xargs -r kill -9", &out);
      sh("ip link del " + host_veth(k), &out);
      sh("ip netns del " + ns(k), &out);
    }
    std::string out;
    sh("ip link del " + bridge_, &out);
  }

  int size() const { return n_; }
  std::string address(int k) const { return "10.77.0." + std::to_string(k + 1); }
  std::string namespace_of(int k) const { return ns(k); }
  // Prefix a shell command with it to run the command on node k.
  std::string on(int k) const { return "ip netns exec " + ns(k) + " "; }
  // The network cable of node k pulled out, or plugged back.
  void set_link(int k, bool up) {
    std::string out;
    EXPECT_TRUE(sh("ip link set " + host_veth(k) + (up ? " up" : " down"), &out)) << out;
  }

 private:
  explicit SimulatedNodes(int n) : n_(n), tag_(std::to_string(::getpid())), bridge_("glb" + tag_) {}

  std::string ns(int k) const { return "glint" + tag_ + "n" + std::to_string(k); }
  std::string host_veth(int k) const { return "gl" + tag_ + "h" + std::to_string(k); }

  static bool sh(const std::string& cmd, std::string* out) {
    int code = 0;
    *out = run_command(cmd + " 2>&1", &code);
    return code == 0;
  }

  // Namespaces and bridges of test processes that no longer exist.
  static void remove_stale() {
    std::string out;
    sh("ip netns list", &out);
    std::set<std::string> gone;
    std::regex ns_re("glint([0-9]+)n[0-9]+"), br_re("glb([0-9]+)");
    std::smatch m;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      if (std::regex_search(line, m, ns_re) && ::kill(std::stoi(m[1]), 0) != 0) {
        std::string ignored;
        sh("ip netns pids " + m[0].str() + " | xargs -r kill -9; ip netns del " + m[0].str(), &ignored);
      }
    sh("ip -o link show type bridge", &out);
    std::istringstream links(out);
    for (std::string line; std::getline(links, line);)
      if (std::regex_search(line, m, br_re) && ::kill(std::stoi(m[1]), 0) != 0) {
        std::string ignored;
        sh("ip link del " + m[0].str(), &ignored);
      }
  }

  int n_;
  std::string tag_, bridge_;
};

}  // namespace glint::testing
