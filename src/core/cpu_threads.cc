#include "core/cpu_threads.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace glint {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

int cpu_threads_for(int requested, int ranks_on_node, const char* omp_num_threads, int cores) {
  if (requested > 0) return requested;
  if (omp_num_threads != nullptr) {
    // OpenMP's form: a positive count, or a comma list whose first entry is the outer level's.
    char* end = nullptr;
    const long n = std::strtol(omp_num_threads, &end, 10);
    if (end != omp_num_threads && n > 0 && (*end == '\0' || *end == ',')) return int(std::min(n, 4096L));
  }
  return std::max(1, std::max(1, cores) / std::max(1, ranks_on_node));
}

int cpu_threads_for(int requested, int ranks_on_node) {
  return cpu_threads_for(requested, ranks_on_node, std::getenv("OMP_NUM_THREADS"), available_cores());
}

}  // namespace glint
