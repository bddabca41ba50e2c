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

// Sets `settings`; whether there were any.
bool set(const std::vector<std::pair<std::string, std::string>>& settings) {
  for (const auto& [name, value] : settings) ::setenv(name.c_str(), value.c_str(), /*overwrite=*/0);
  return !settings.empty();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> missing_process_settings() {
  const std::pair<const char*, const char*> wanted[] = {
      {"OMP_WAIT_POLICY", "PASSIVE"},
      {"OPENBLAS_CORETYPE", openblas_kernels()},
      {"ONEDNN_PRIMITIVE_CACHE_CAPACITY", "128"},
  };
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, value] : wanted)
    if (*value != '\0' && std::getenv(name) == nullptr) out.emplace_back(name, value);
  return out;
}

void set_process_settings() { set(missing_process_settings()); }

void restart_with_process_settings(char** argv) {
  if (set(missing_process_settings())) ::execv("/proc/self/exe", argv);
}

}  // namespace glint
