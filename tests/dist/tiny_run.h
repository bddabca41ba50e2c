// Small runs of the glint binary for the multi-rank tests: a tiny Qwen3-MoE model
// written by init-model, pre-tokenized data over its 16 ids, and `glint launch`.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "test_util.h"

namespace glint::testing {

inline std::string glint_bin() { return GLINT_BINARY; }

// A command through `glint launch -n W` (or directly for W = 1), with a short
// distributed timeout so that a collective mismatch fails instead of hanging, and a
// limit on the whole command (exit code 124 past it) so that a run that never ends fails
// its test with its output instead of holding it until ctest's timeout.
inline RunResult launch(int ranks, const std::string& args) {
  constexpr int kLimitSeconds = 300;
  std::string cmd = "GLINT_DIST_TIMEOUT_SECONDS=60 timeout -k 10 " + std::to_string(kLimitSeconds) + " " +
                    glint_bin() + (ranks > 1 ? " launch -n " + std::to_string(ranks) + " -- " + glint_bin() : "") +
                    " " + args;
  RunResult r = glint::testing::run(cmd);
  if (r.exit_code == 124)
    r.output += "\n[test] the command ran past " + std::to_string(kLimitSeconds) + " s and was stopped\n";
  return r;
}

// A tiny Qwen3-MoE (8 experts, a dense second layer) written by init-model; `hidden`
// sets its size.
inline std::string make_model(const std::string& dir, int hidden = 32, int expert_width = 16, int vocab = 16) {
  nlohmann::json cfg = {{"model_type", "qwen3_moe"},     {"vocab_size", vocab},       {"hidden_size", hidden},
                        {"intermediate_size", 48},       {"moe_intermediate_size", expert_width},
                        {"num_hidden_layers", 2},        {"num_attention_heads", 4},  {"num_key_value_heads", 2},
                        {"head_dim", 8},                 {"num_experts", 8},          {"num_experts_per_tok", 2},
                        {"mlp_only_layers", {1}},        {"initializer_range", 0.1}};
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << cfg.dump();
  RunResult r = glint::testing::run_glint("init-model --config " + dir + "/config.json --output " + dir +
                                          "/model --seed 3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir + "/model";
}

// Pre-tokenized samples of the model's 16 ids.
inline std::string make_data(const std::string& path, int lines, int seed) {
  std::ofstream out(path);
  uint64_t x = uint64_t(seed) * 2654435761u + 7;
  for (int i = 0; i < lines; ++i) {
    nlohmann::json ids = nlohmann::json::array();
    int len = 5 + int(x % 7);
    for (int k = 0; k < len; ++k) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      ids.push_back(int((x >> 33) % 16));
    }
    out << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
  }
  return path;
}

// Waits for `pid` up to `seconds`; its exit status (128 + signal), or -1 on timeout.
inline int wait_for(pid_t pid, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    int status;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

// Starts `cmd` (through sh, exec'd so the pid is the command's) with output to `log`.
inline pid_t start(const std::string& cmd, const std::string& log) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string full = "exec env " + cmd + " > '" + log + "' 2>&1";
    ::execl("/bin/sh", "sh", "-c", full.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// |a - b| relative to the larger magnitude (or to `floor`, when both are below it).
inline double rel(double a, double b, double floor = 1e-300) {
  return std::abs(a - b) / std::max(floor, std::max(std::abs(a), std::abs(b)));
}

}  // namespace glint::testing
