// How many threads a process's CPU kernels take when the user names no number.
#pragma once

namespace glint {

// The cores this process may run on: its affinity mask (taskset, cgroups' cpusets, Slurm's
// binding), else the machine's.
int available_cores();

// The intra-op threads for --threads `requested` (0: the default) when `ranks_on_node`
// processes share this node: the request when given; else OMP_NUM_THREADS when the
// environment sets it (torchrun sets 1 for each of several ranks); else the available
// cores divided among the node's ranks, at least 1. Every rank taking every core would put
// k ranks' threads on each core, where an intra-op pool that waits for all its threads runs
// many times slower (4 ranks on 2 cores: 20x).
int cpu_threads_for(int requested, int ranks_on_node);

// The same choice from given inputs (omp_num_threads: the variable's text, or null).
int cpu_threads_for(int requested, int ranks_on_node, const char* omp_num_threads, int cores);

}  // namespace glint
