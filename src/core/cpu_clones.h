// GLINT_CPU_CLONES: a function also compiled for AVX2 and AVX-512, the version the CPU has
// chosen when the program loads. glint's baseline build targets any x86-64 (SSE2 vectors,
// a quarter of AVX-512's width); a hand-written CPU loop marked with it vectorizes at the
// machine's width. g++ on x86-64 only (elsewhere it is nothing).
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define GLINT_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GLINT_CPU_CLONES
#endif
