// Helpers shared by the tests.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

namespace glint::testing {

// An empty directory under the test temp dir, unique per name and per test process
// (so concurrent test runs on one machine never share files); recreated each call.
inline std::string fresh_temp_dir(const std::string& name) {
  std::filesystem::path d = std::filesystem::path(::testing::TempDir()) /
                            ("glint_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace glint::testing
