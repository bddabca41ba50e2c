// Helpers shared by the tests.
#pragma once

#include <gtest/gtest.h>

#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
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

// Runs a shell command; its stdout only (stderr goes where the test's goes), and its exit
// status (128 + the signal number when a signal ended it).
inline std::string run_command_stdout(const std::string& cmd, int* exit_code) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

// Runs a shell command; its stdout and stderr together, and its exit status as above.
inline std::string run_command(const std::string& cmd, int* exit_code) {
  return run_command_stdout(cmd + " 2>&1", exit_code);
}

// A command's exit status, its stdout and stderr together, and its wall time.
struct RunResult {
  int exit_code;
  std::string output;
  double seconds = 0;
};

// Runs a shell command (RunResult form of run_command).
inline RunResult run(const std::string& cmd) {
  RunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  r.output = run_command(cmd, &r.exit_code);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

#ifdef GLINT_BINARY
// Runs the glint binary under test with `args` (in `cwd` when given).
inline RunResult run_glint(const std::string& args, const std::string& cwd = "") {
  return run((cwd.empty() ? "" : "cd '" + cwd + "' && ") + std::string(GLINT_BINARY) + " " + args);
}
#endif

// Writes `text` as the whole of the file at `path` (binary: no newline translation).
inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// One JSON value per line of a JSONL file (a metrics.jsonl); none when it is absent.
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Sets (or, with nullptr, clears) an environment variable for the object's lifetime, then
// puts back what was there, also when the test fails half way.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    set(value);
  }
  ~ScopedEnv() { set(old_ ? old_->c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const char* value) {
    if (value)
      ::setenv(name_.c_str(), value, 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A small disk that fills up: a tmpfs of `bytes` (rounded up to pages) mounted at `path`
// (created) for the object's lifetime. Needs root, as CI has; ok() is false elsewhere,
// with the reason in why().
class SmallDisk {
 public:
  SmallDisk(const std::string& path, uint64_t bytes) : path_(path) {
    std::filesystem::create_directories(path);
    if (::mount("tmpfs", path.c_str(), "tmpfs", 0, ("size=" + std::to_string(bytes)).c_str()) == 0)
      mounted_ = true;
    else
      why_ = "cannot mount a tmpfs at " + path + " (" + std::strerror(errno) + "): needs root";
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;
  bool ok() const { return mounted_; }
  const std::string& why() const { return why_; }
  // Writes `name` until the disk is full.
  void fill(const std::string& name = "filler") const {
    std::ofstream f(path_ + "/" + name, std::ios::binary);
    const std::string block(4096, 'x');
    while (f.write(block.data(), block.size()) && f.flush()) {
    }
  }

 private:
  std::string path_, why_;
  bool mounted_ = false;
};

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
