#include "io/quantized.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace glint {

namespace {

float float_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::string hex_byte(uint8_t b) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  return std::string("0x") + kDigits[b >> 4] + kDigits[b & 15];
}

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Products are formed in Acc and rounded once to the output type T.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The smallest magnitude that rounds to infinity when converted to T (round to nearest
// even: the midpoint between T's largest finite value and the next power of two, whose
// significand is odd-to-even, rounds up). Products at or above it, and NaN, are errors.
template <typename T>
Acc<T> overflow_limit() {
  if constexpr (std::is_same_v<T, c10::Half>) {
    return 65520.0f;  // max 65504 = 0x7BFF; halfway to 65536
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    return float_from_bits(0x7F7F8000u);  // max 0x7F7F; halfway to 0x7F80 (inf)
  } else {
    return std::numeric_limits<Acc<T>>::infinity();
  }
}

// Every byte's value under `decode`, in the accumulation type.
template <typename A, float (*decode)(uint8_t)>
const std::array<A, 256>& code_table() {
  static const std::array<A, 256> t = [] {
    std::array<A, 256> a;
    for (int c = 0; c < 256; ++c) a[c] = A(decode(uint8_t(c)));
    return a;
  }();
  return t;
}

// Both nibbles of a byte: [2 * b] the low one (the even column), [2 * b + 1] the high one.
template <typename A>
const std::array<A, 512>& e2m1_pair_table() {
  static const std::array<A, 512> t = [] {
    std::array<A, 512> a;
    for (int b = 0; b < 256; ++b) {
      a[2 * b] = A(e2m1_to_float(uint8_t(b & 15)));
      a[2 * b + 1] = A(e2m1_to_float(uint8_t(b >> 4)));
    }
    return a;
  }();
  return t;
}

// A 2-D CPU tensor of one of `dtypes` (`what` names it in messages, e.g. "codes").
void check_input(const at::Tensor& t, const std::string& name, const char* what,
                 std::initializer_list<c10::ScalarType> dtypes, const char* expected) {
  GLINT_CHECK(t.defined(), name, ": ", what, " tensor is undefined");
  GLINT_CHECK(t.device().is_cpu(), name, ": ", what, " must be on the CPU, found ", t.device());
  bool ok = false;
  for (auto d : dtypes) ok = ok || t.scalar_type() == d;
  GLINT_CHECK(ok, name, ": ", what, " have dtype ", c10::toString(t.scalar_type()), ", expected ",
              expected);
  GLINT_CHECK(t.dim() == 2, name, ": ", what, " must be 2-D, found shape ",
              shape_str(t.sizes()));
}

void check_out_dtype(c10::ScalarType out, const std::string& name) {
  GLINT_CHECK(out == at::kFloat || out == at::kBFloat16 || out == at::kHalf || out == at::kDouble,
              name, ": cannot dequantise to ", c10::toString(out),
              " (expected Float, BFloat16, Half or Double)");
}

// Calls f(T{}) with T the C++ type of `out` (one of those check_out_dtype accepts).
template <typename F>
void dispatch_out(c10::ScalarType out, F&& f) {
  switch (out) {
    case at::kFloat: f(float{}); break;
    case at::kDouble: f(double{}); break;
    case at::kBFloat16: f(c10::BFloat16{}); break;
    case at::kHalf: f(c10::Half{}); break;
    default: GLINT_ASSERT(false, "dispatch_out: unchecked dtype ", c10::toString(out));
  }
}

// Rows per parallel task: about 64 Ki elements each.
int64_t grain_rows(int64_t cols) {
  return std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(cols, 1));
}

// W[rows, C] from E4M3 codes and per-block scales (decoded, [SR, SC] row-major), for rows
// starting at full-tensor row first_row. Returns false when a product is NaN or rounds
// to infinity in T; `out` then holds garbage and the caller diagnoses.
template <typename T>
bool fp8_kernel(const uint8_t* codes, int64_t rows, int64_t C, const std::vector<Acc<T>>& scale,
                int64_t SC, int64_t block, int64_t first_row, T* out) {
  using A = Acc<T>;
  const A* lut = code_table<A, e4m3_to_float>().data();
  const A limit = overflow_limit<T>();
  std::atomic<bool> all_ok{true};
  at::parallel_for(0, rows, grain_rows(C), [&](int64_t begin, int64_t end) {
    bool ok = true;
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t* c = codes + i * C;
      T* o = out + i * C;
      const A* srow = scale.data() + ((first_row + i) / block) * SC;
      for (int64_t bj = 0, j0 = 0; j0 < C; ++bj, j0 += block) {
        const A s = srow[bj];
        const int64_t j1 = std::min(C, j0 + block);
        for (int64_t j = j0; j < j1; ++j) {
          const A v = lut[c[j]] * s;
          ok &= std::abs(v) < limit;  // false for NaN too
          o[j] = T(v);
        }
      }
    }
    if (!ok) all_ok.store(false, std::memory_order_relaxed);
  });
  return all_ok.load();
}

template <typename T>
bool fp4_kernel(const uint8_t* packed, const uint8_t* scale, int64_t rows, int64_t C, T* out) {
  using A = Acc<T>;
  const A* pairs = e2m1_pair_table<A>().data();
  const A* e8m0 = code_table<A, e8m0_to_float>().data();
  const A limit = overflow_limit<T>();
  const int64_t half = C / 2, groups = C / 32;
  std::atomic<bool> all_ok{true};
  at::parallel_for(0, rows, grain_rows(C), [&](int64_t begin, int64_t end) {
    bool ok = true;
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t* p = packed + i * half;
      const uint8_t* srow = scale + i * groups;
      T* o = out + i * C;
      for (int64_t g = 0; g < groups; ++g) {
        const A s = e8m0[srow[g]];
        for (int64_t k = 16 * g; k < 16 * g + 16; ++k) {
          const A lo = pairs[2 * p[k]] * s, hi = pairs[2 * p[k] + 1] * s;
          ok &= (std::abs(lo) < limit) & (std::abs(hi) < limit);
          o[2 * k] = T(lo);
          o[2 * k + 1] = T(hi);
        }
      }
    }
    if (!ok) all_ok.store(false, std::memory_order_relaxed);
  });
  return all_ok.load();
}

// Converts `v` to the output type and back: infinite when it overflows there.
template <typename T>
bool overflows(double v) {
  return !std::isfinite(double(T(Acc<T>(v))));
}

}  // namespace

float e4m3_to_float(uint8_t code) {
  const uint32_t sign = uint32_t(code >> 7) << 31;
  const uint32_t exp = (code >> 3) & 15, mant = code & 7;
  if (exp == 15 && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) {  // subnormal: mant/8 * 2^-6 = mant * 2^-9 (float 2^-9 = 0x3B000000)
    float m = float(mant) * float_from_bits(0x3B000000u);
    return sign ? -m : m;
  }
  // Normal: rebias the exponent from 7 to 127 and left-align the 3 mantissa bits.
  return float_from_bits(sign | ((exp + 120) << 23) | (mant << 20));
}

float e8m0_to_float(uint8_t code) {
  if (code == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  // 2^(code - 127) is float's own biased exponent; 2^-127 is float's subnormal 0x00400000.
  return float_from_bits(code == 0 ? 0x00400000u : uint32_t(code) << 23);
}

float e2m1_to_float(uint8_t code) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  GLINT_ASSERT(code < 16, "e2m1_to_float: code ", int(code), " is wider than 4 bits");
  return (code & 8) ? -kMagnitude[code & 7] : kMagnitude[code & 7];
}

at::Tensor dequantize_fp8_blocks(const at::Tensor& codes_in, const at::Tensor& scale_in,
                                 bool scale_is_e8m0, c10::ScalarType out,
                                 const std::string& name, int64_t block, int64_t first_row,
                                 int64_t total_rows) {
  check_input(codes_in, name, "codes", {at::kByte}, "Byte (raw F8_E4M3 codes)");
  if (scale_is_e8m0)
    check_input(scale_in, name, "scales", {at::kByte}, "Byte (raw F8_E8M0 codes)");
  else
    check_input(scale_in, name, "scales", {at::kFloat}, "Float (float32 scale_inv)");
  check_out_dtype(out, name);
  GLINT_CHECK(block >= 1, name, ": block size must be at least 1, got ", block);
  const int64_t rows = codes_in.size(0), C = codes_in.size(1);
  if (total_rows < 0) total_rows = first_row + rows;
  GLINT_CHECK(first_row >= 0 && rows <= total_rows - first_row, name, ": rows [", first_row, ", ",
              first_row + rows, ") are out of range for a weight of ", total_rows, " rows");
  const int64_t SR = (total_rows + block - 1) / block, SC = (C + block - 1) / block;
  GLINT_CHECK(scale_in.size(0) == SR && scale_in.size(1) == SC, name, ": scale has shape ",
              shape_str(scale_in.sizes()), ", expected ", shape_str({SR, SC}), " for ", block,
              "x", block, " blocks of a ", shape_str({total_rows, C}), " weight");

  at::Tensor codes = codes_in.contiguous(), scale = scale_in.contiguous();
  at::Tensor result = at::empty({rows, C}, at::TensorOptions().dtype(out));
  dispatch_out(out, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    // Every block's scale, checked and decoded: ceil(R/b) * ceil(C/b) entries, tiny.
    std::vector<A> s(size_t(SR * SC));
    if (scale_is_e8m0) {
      const uint8_t* p = scale.data_ptr<uint8_t>();
      for (int64_t k = 0; k < SR * SC; ++k) {
        GLINT_CHECK(p[k] != 0xFF, name, ": E8M0 scale of block [", k / SC, ", ", k % SC,
                    "] is the NaN code 0xFF");
        s[k] = A(e8m0_to_float(p[k]));
      }
    } else {
      const float* p = scale.data_ptr<float>();
      for (int64_t k = 0; k < SR * SC; ++k) {
        GLINT_CHECK(std::isfinite(p[k]) && p[k] > 0, name, ": scale_inv of block [", k / SC, ", ",
                    k % SC, "] is ", p[k], "; it must be finite and positive");
        s[k] = A(p[k]);
      }
    }
    const uint8_t* c = codes.data_ptr<uint8_t>();
    if (fp8_kernel<T>(c, rows, C, s, SC, block, first_row, result.data_ptr<T>())) return;
    // Diagnose serially: the first NaN code, else the first product out of T's range.
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < C; ++j)
        GLINT_CHECK((c[i * C + j] & 0x7F) != 0x7F, name, ": E4M3 NaN code ", hex_byte(c[i * C + j]),
                    " at element [", first_row + i, ", ", j, "]");
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < C; ++j) {
        double v = double(e4m3_to_float(c[i * C + j])) *
                   double(s[((first_row + i) / block) * SC + j / block]);
        GLINT_CHECK(!overflows<T>(v), name, ": element [", first_row + i, ", ", j, "] = ", v,
                    " overflows ", c10::toString(out));
      }
    GLINT_ASSERT(false, "dequantize_fp8_blocks: the kernel flagged a value no check finds");
  });
  return result;
}

at::Tensor dequantize_fp4_e2m1(const at::Tensor& packed_in, const at::Tensor& scale_in,
                               c10::ScalarType out, const std::string& name) {
  check_input(packed_in, name, "packed codes", {at::kByte, at::kChar},
              "Byte or Char (two E2M1 codes a byte)");
  check_input(scale_in, name, "scales", {at::kByte}, "Byte (raw F8_E8M0 codes)");
  check_out_dtype(out, name);
  const int64_t R = packed_in.size(0), half = packed_in.size(1), C = 2 * half;
  GLINT_CHECK(half % 16 == 0, name, ": packed width ", half, " holds ", C,
              " columns, not a multiple of the 32-column scale block");
  GLINT_CHECK(scale_in.size(0) == R && scale_in.size(1) == C / 32, name, ": scale has shape ",
              shape_str(scale_in.sizes()), ", expected ", shape_str({R, C / 32}),
              " for 1x32 blocks of a ", shape_str({R, C}), " weight (packed ",
              shape_str(packed_in.sizes()), ")");

  at::Tensor packed = packed_in.contiguous(), scale = scale_in.contiguous();
  const uint8_t* p = static_cast<const uint8_t*>(packed.data_ptr());
  const uint8_t* s = scale.data_ptr<uint8_t>();
  if (const void* nan = std::memchr(s, 0xFF, size_t(scale.numel()))) {
    int64_t k = static_cast<const uint8_t*>(nan) - s;
    fail(name, ": E8M0 scale of block [", k / (C / 32), ", ", k % (C / 32),
         "] is the NaN code 0xFF");
  }
  at::Tensor result = at::empty({R, C}, at::TensorOptions().dtype(out));
  dispatch_out(out, [&](auto tag) {
    using T = decltype(tag);
    if (fp4_kernel<T>(p, s, R, C, result.data_ptr<T>())) return;
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) {
        uint8_t byte = p[i * half + j / 2];
        double v = double(e2m1_to_float(j % 2 ? byte >> 4 : byte & 15)) *
                   double(e8m0_to_float(s[i * (C / 32) + j / 32]));
        GLINT_CHECK(!overflows<T>(v), name, ": element [", i, ", ", j, "] = ", v, " overflows ",
                    c10::toString(out));
      }
    GLINT_ASSERT(false, "dequantize_fp4_e2m1: the kernel flagged a value no check finds");
  });
  return result;
}

}  // namespace glint
