#include "core/process_settings.h"

#include <unistd.h>

#include <cstdlib>

namespace glint {

namespace {

// The OpenBLAS kernels for this CPU, or "" to leave the choice to OpenBLAS.
const char* openblas_kernels() {
  __builtin_cpu_init();
  if (!__builtin_cpu_is("intel")) return "";
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd"))
    return "SKYLAKEX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "HASWELL";
  return "";
}

}  // namespace

std::vector<std::string> missing_process_settings() {
  const std::pair<const char*, const char*> wanted[] = {
      {"OMP_WAIT_POLICY", "PASSIVE"},
      {"OPENBLAS_CORETYPE", openblas_kernels()},
      {"ONEDNN_PRIMITIVE_CACHE_CAPACITY", "128"},
  };
  std::vector<std::string> out;
  for (const auto& [name, value] : wanted)
    if (*value != '\0' && std::getenv(name) == nullptr) out.push_back(std::string(name) + "=" + value);
  return out;
}

void set_process_settings() {
  for (const std::string& s : missing_process_settings()) {
    const size_t eq = s.find('=');
    ::setenv(s.substr(0, eq).c_str(), s.substr(eq + 1).c_str(), /*overwrite=*/0);
  }
}

void restart_with_process_settings(char** argv) {
  if (missing_process_settings().empty()) return;
  set_process_settings();
  ::execv("/proc/self/exe", argv);
}

}  // namespace glint
