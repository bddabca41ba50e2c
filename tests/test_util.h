// Helpers shared by the tests.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace glint::testing {

// f throws glint::Error whose message contains `word`.
inline void expect_error_naming(const std::function<void()>& f, const std::string& word) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming " << word;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}


// An empty directory under the test temp dir, unique per name and per test process
// (so concurrent test runs on one machine never share files); recreated each call.
inline std::string fresh_temp_dir(const std::string& name) {
  std::filesystem::path d = std::filesystem::path(::testing::TempDir()) /
                            ("glint_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// Runs a shell command; its stdout and stderr together, and its exit status (128 + the
// signal number when a signal ended it).
inline std::string run_command(const std::string& cmd, int* exit_code) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

// A command's exit status and its stdout and stderr together.
struct RunResult {
  int exit_code;
  std::string output;
};

// Runs a shell command (RunResult form of run_command).
inline RunResult run(const std::string& cmd) {
  RunResult r;
  r.output = run_command(cmd, &r.exit_code);
  return r;
}

#ifdef GLINT_BINARY
// Runs the glint binary under test with `args` (in `cwd` when given).
inline RunResult run_glint(const std::string& args, const std::string& cwd = "") {
  return run((cwd.empty() ? "" : "cd '" + cwd + "' && ") + std::string(GLINT_BINARY) + " " + args);
}
#endif

// One JSON value per line of a JSONL file (a metrics.jsonl); none when it is absent.
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The message of the glint::Error that f throws; "" when it throws none.
inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const glint::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace glint::testing
