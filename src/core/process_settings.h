// Settings that the libraries under libtorch read from the environment, which glint makes
// for itself unless the user gave them:
//   OMP_WAIT_POLICY=PASSIVE: libgomp's default spin-waiting keeps idle OpenMP workers on
//     the cores that OpenBLAS's own threads need for every GEMM; passive waiting made a
//     training step 1.5x faster on 2 cores (docs/BENCHMARKS.md).
//   OPENBLAS_CORETYPE: OpenBLAS picks its kernels from the CPU models it knows, and takes
//     its oldest (Prescott, SSE3) for an Intel model newer than its release: Debian 12's
//     0.3.21 on a Sapphire Rapids VM trained 5x slower than with the Skylake-X kernels
//     that CPU runs (docs/BENCHMARKS.md, "OpenBLAS's kernels"). On Intel CPUs glint names
//     the kernels the instruction set allows: SKYLAKEX with AVX-512 (F, BW, DQ, VL, CD),
//     HASWELL with AVX2 and FMA. AMD models are left to OpenBLAS.
//   ONEDNN_PRIMITIVE_CACHE_CAPACITY=128: oneDNN, which runs libtorch's bf16 matrix products
//     on CPUs with bf16 instructions, caches a primitive for each shape it meets, 1,024 by
//     default: expert GEMMs of every token count held 50 MB of a 45M-parameter model's
//     500 MB bf16 peak (docs/BENCHMARKS.md, "bf16: where its saving goes").
// libgomp and OpenBLAS read theirs as they load, before main, so a process that links
// libtorch must start with them: `glint` sets them before it hands a command to glint-core,
// and glint-core (or a test program) started without them starts itself again with them.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace glint {

// The settings (name, value) this process's environment lacks.
std::vector<std::pair<std::string, std::string>> missing_process_settings();

// Adds the missing settings to the environment (for a program about to start another).
void set_process_settings();

// When settings are missing: adds them and executes this program again with the same
// arguments (the same process), so that its libraries load with them. Returns only when
// nothing was missing or the execution failed (then it runs on without them).
void restart_with_process_settings(char** argv);

}  // namespace glint
