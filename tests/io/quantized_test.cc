// Dequantisation of DeepSeek-V3/V4 FP8 and FP4 weights (io/quantized.h). References are
// written here from the format definitions (std::ldexp on the bit fields) and naive
// per-element loops, sharing no code with the functions under test.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>

#include "core/error.h"
#include "io/quantized.h"
#include "io/safetensors.h"

#include "test_util.h"

namespace glint {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// E4M3 from its definition: sign, exponent e (bias 7), mantissa m; e = 0 is subnormal;
// S.1111.111 is NaN.
double ref_e4m3(int code) {
  int sign = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return kNaN;
  double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -mag : mag;
}

double ref_e8m0(int code) { return code == 255 ? kNaN : std::ldexp(1.0, code - 127); }

// E2M1 from its definition: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0;
// exponent 0 is subnormal (m * 0.5).
double ref_e2m1(int code) {
  int sign = code >> 3, e = (code >> 1) & 3, m = code & 1;
  double mag = e == 0 ? m * 0.5 : std::ldexp(1.0 + m / 2.0, e - 1);
  return sign ? -mag : mag;
}

// Random E4M3 codes [R, C] with no NaN code.
at::Tensor random_codes(int64_t R, int64_t C) {
  at::Tensor c = at::randint(0, 256, {R, C}, at::kInt);
  c = at::where((c & 0x7F) == 0x7F, c - 1, c);
  return c.to(at::kByte);
}

// W[i, j] = e4m3(codes[i, j]) * scale[i / b, j / b] in double (exact), per element.
// `scale` is float32 scale_inv or uint8 E8M0 codes.
at::Tensor naive_fp8(const at::Tensor& codes, const at::Tensor& scale, int64_t b) {
  int64_t R = codes.size(0), C = codes.size(1);
  at::Tensor out = at::empty({R, C}, at::kDouble);
  auto c = codes.accessor<uint8_t, 2>();
  auto o = out.accessor<double, 2>();
  bool e8m0 = scale.scalar_type() == at::kByte;
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      double s = e8m0 ? ref_e8m0(scale[i / b][j / b].item<uint8_t>())
                      : double(scale[i / b][j / b].item<float>());
      o[i][j] = ref_e4m3(c[i][j]) * s;
    }
  return out;
}

// W[i, j] = e2m1(nibble) * e8m0(scale[i, j / 32]) in double, per element.
at::Tensor naive_fp4(const at::Tensor& packed, const at::Tensor& scale) {
  int64_t R = packed.size(0), C = 2 * packed.size(1);
  at::Tensor out = at::empty({R, C}, at::kDouble);
  auto p = packed.accessor<uint8_t, 2>();
  auto s = scale.accessor<uint8_t, 2>();
  auto o = out.accessor<double, 2>();
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      int nibble = j % 2 == 0 ? p[i][j / 2] & 15 : p[i][j / 2] >> 4;
      o[i][j] = ref_e2m1(nibble) * ref_e8m0(s[i][j / 32]);
    }
  return out;
}

// Equal values and dtype; also equal signs of zero.
void expect_same(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(at::equal(got, want))
      << what << ": max diff "
      << (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  EXPECT_TRUE(at::equal(at::signbit(got), at::signbit(want))) << what;
}

// `call` throws glint::Error whose message names `name` and contains each of `words`.
void expect_error(const std::function<void()>& call, const std::string& name,
                  std::initializer_list<std::string> words) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming " << name;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
    for (const auto& w : words)
      EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' in: " << msg;
  }
}

TEST(QuantizedCodes, E4M3EveryCodeMatchesTheDefinition) {
  for (int c = 0; c < 256; ++c) {
    float got = e4m3_to_float(uint8_t(c));
    double want = ref_e4m3(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
      continue;
    }
    EXPECT_EQ(double(got), want) << "code " << c;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << "code " << c;
  }
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_float(0x40), 2.0f);
  EXPECT_EQ(e4m3_to_float(0xC4), -3.0f);
  EXPECT_EQ(e4m3_to_float(0x00), 0.0f);
  EXPECT_FALSE(std::signbit(e4m3_to_float(0x00)));
  EXPECT_EQ(e4m3_to_float(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));  // -0.0
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
  EXPECT_FALSE(std::isnan(e4m3_to_float(0x78)));  // exponent 15 with m < 7 is a number: 256
  EXPECT_EQ(e4m3_to_float(0x78), 256.0f);
}

TEST(QuantizedCodes, E8M0AndE2M1MatchTheDefinition) {
  for (int c = 0; c < 255; ++c) EXPECT_EQ(double(e8m0_to_float(uint8_t(c))), ref_e8m0(c)) << c;
  EXPECT_EQ(e8m0_to_float(0), std::ldexp(1.0f, -127));
  EXPECT_GT(e8m0_to_float(0), 0.0f);
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_to_float(128), 2.0f);
  EXPECT_EQ(e8m0_to_float(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(e8m0_to_float(255)));

  const float magnitudes[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(double(e2m1_to_float(uint8_t(c))), ref_e2m1(c)) << c;
    EXPECT_EQ(e2m1_to_float(uint8_t(c)), c < 8 ? magnitudes[c] : -magnitudes[c - 8]) << c;
  }
  EXPECT_TRUE(std::signbit(e2m1_to_float(8)));  // -0.0
}

TEST(QuantizedFp8, BlocksMatchANaiveLoop) {
  at::manual_seed(3);
  // 130 x 260 with 128-blocks: partial blocks at the bottom (2 rows) and the right (4 columns).
  at::Tensor codes = random_codes(130, 260);
  codes[0][0] = 0x80;    // -0.0 keeps its sign
  codes[129][259] = 0x7E;  // 448 in the corner (partial, partial) block
  for (int64_t block : {128, 16, 7}) {
    SCOPED_TRACE("block " + std::to_string(block));
    int64_t SR = (130 + block - 1) / block, SC = (260 + block - 1) / block;
    at::Tensor scale_inv = at::rand({SR, SC}) * 4 + 1e-3;
    // 2^-27 .. 2^5: 448 * 2^5 stays inside Half's range (65504).
    at::Tensor e8m0 = at::randint(100, 133, {SR, SC}, at::kInt).to(at::kByte);
    for (const at::Tensor& scale : {scale_inv, e8m0}) {
      bool is_e8m0 = scale.scalar_type() == at::kByte;
      SCOPED_TRACE(is_e8m0 ? "E8M0" : "float32 scale_inv");
      at::Tensor want = naive_fp8(codes, scale, block);
      expect_same(dequantize_fp8_blocks(codes, scale, is_e8m0, at::kDouble, "w", block), want,
                  "double");
      for (auto out : {at::kFloat, at::kBFloat16, at::kHalf})
        expect_same(dequantize_fp8_blocks(codes, scale, is_e8m0, out, "w", block),
                    want.to(out), c10::toString(out));
    }
  }
  // The default block is 128; a non-contiguous input gives the same values.
  at::Tensor scale = at::rand({2, 3}) + 0.5;
  at::Tensor w = dequantize_fp8_blocks(codes, scale, false, at::kFloat, "w");
  expect_same(w, naive_fp8(codes, scale, 128).to(at::kFloat), "default block");
  at::Tensor t_codes = codes.t().contiguous().t();
  ASSERT_FALSE(t_codes.is_contiguous());
  expect_same(dequantize_fp8_blocks(t_codes, scale, false, at::kFloat, "w"), w, "strided");
}

TEST(QuantizedFp8, RowRangeEqualsThoseRowsOfTheWhole) {
  at::manual_seed(4);
  at::Tensor codes = random_codes(300, 260);
  for (bool is_e8m0 : {false, true}) {
    at::Tensor scale = is_e8m0 ? at::randint(110, 140, {3, 3}, at::kInt).to(at::kByte)
                               : at::rand({3, 3}) + 0.1;
    at::Tensor whole = dequantize_fp8_blocks(codes, scale, is_e8m0, at::kBFloat16, "w");
    // Ranges starting and ending mid-block, on block edges, one row, none, the last rows.
    for (auto [first, n] : std::vector<std::pair<int64_t, int64_t>>{
             {100, 50}, {127, 3}, {128, 128}, {5, 250}, {299, 1}, {64, 0}, {256, 44}, {0, 300}}) {
      at::Tensor part = dequantize_fp8_blocks(codes.narrow(0, first, n), scale, is_e8m0,
                                              at::kBFloat16, "w", 128, first, 300);
      expect_same(part, whole.narrow(0, first, n),
                  "rows " + std::to_string(first) + "+" + std::to_string(n));
    }
    // total_rows defaults to first_row + rows: the last rows of the tensor.
    expect_same(dequantize_fp8_blocks(codes.narrow(0, 250, 50), scale, is_e8m0, at::kBFloat16,
                                      "w", 128, 250),
                whole.narrow(0, 250, 50), "last rows, default total");
  }
}

TEST(QuantizedFp4, HandComputedBytes) {
  // [3, 64]: packed [3, 32], scales [3, 2]; every byte not set below is 0x00 (two zeros).
  at::Tensor packed = at::zeros({3, 32}, at::kByte);
  at::Tensor scale = at::full({3, 2}, 127, at::kByte);  // 1.0
  packed[0][0] = 0x21;  // low 0x1 = 0.5 (column 0), high 0x2 = 1.0 (column 1)
  packed[0][1] = 0xF8;  // low 0x8 = -0.0 (column 2), high 0xF = -6 (column 3)
  packed[0][31] = 0x7E;  // low 0xE = -4 (column 62), high 0x7 = 6 (column 63)
  scale[1][0] = 128;     // 2.0 for row 1, columns 0..31
  packed[1][0] = 0x7A;   // low 0xA = -1 -> -2, high 0x7 = 6 -> 12
  packed[1][16] = 0x44;  // column 32 and 33: 2 * 1.0 (group 1 keeps scale 1.0)
  scale[2][1] = 125;     // 0.25 for row 2, columns 32..63
  packed[2][16] = 0x53;  // low 0x3 = 1.5 -> 0.375 (column 32), high 0x5 = 3 -> 0.75 (column 33)
  packed[2][15] = 0xDC;  // low 0xC = -2 (column 30), high 0xD = -3 (column 31), scale 1.0
  at::Tensor want = at::zeros({3, 64}, at::kFloat);
  want[0][0] = 0.5f;
  want[0][1] = 1.0f;
  want[0][2] = -0.0f;
  want[0][3] = -6.0f;
  want[0][62] = -4.0f;
  want[0][63] = 6.0f;
  want[1][0] = -2.0f;
  want[1][1] = 12.0f;
  want[1][32] = 2.0f;
  want[1][33] = 2.0f;
  want[2][32] = 0.375f;
  want[2][33] = 0.75f;
  want[2][30] = -2.0f;
  want[2][31] = -3.0f;
  at::Tensor got = dequantize_fp4_e2m1(packed, scale, at::kFloat, "e");
  expect_same(got, want, "uint8");
  // The same bytes as int8 (the checkpoint's I8), and other output dtypes.
  expect_same(dequantize_fp4_e2m1(packed.view(at::kChar), scale, at::kFloat, "e"),
              want, "int8");
  expect_same(dequantize_fp4_e2m1(packed.view(at::kChar), scale, at::kBFloat16, "e"),
              want.to(at::kBFloat16), "bf16");
}

TEST(QuantizedFp4, RandomMatchesANaiveLoopAndRowsSlice) {
  at::manual_seed(5);
  at::Tensor packed = at::randint(0, 256, {37, 96}, at::kInt).to(at::kByte);  // C = 192
  // Up to 2^123: 6 * 2^123 stays inside float's range.
  at::Tensor scale = at::randint(0, 251, {37, 6}, at::kInt).to(at::kByte);
  scale[0][0] = 0;
  at::Tensor want = naive_fp4(packed, scale);
  at::Tensor whole = dequantize_fp4_e2m1(packed, scale, at::kDouble, "e");
  expect_same(whole, want, "double");
  expect_same(dequantize_fp4_e2m1(packed, scale, at::kFloat, "e"),
              want.to(at::kFloat), "float");
  // The largest scale, 2^127, in double.
  at::Tensor top = scale.clone();
  top[0][1] = 254;
  expect_same(dequantize_fp4_e2m1(packed, top, at::kDouble, "e"), naive_fp4(packed, top),
              "scale 254");
  // A row range: the same rows of packed and scale.
  for (auto [first, n] : std::vector<std::pair<int64_t, int64_t>>{{3, 10}, {36, 1}, {0, 0}})
    expect_same(dequantize_fp4_e2m1(packed.narrow(0, first, n), scale.narrow(0, first, n),
                                    at::kDouble, "e"),
                whole.narrow(0, first, n), "rows " + std::to_string(first));
}

// A safetensors file written by hand with the F8_E4M3 / F8_E8M0 / I8 dtype strings.
TEST(QuantizedSafetensors, RoundTripThroughAFile) {
  at::manual_seed(6);
  std::string p = glint::testing::fresh_temp_dir("quantized_st") + "/q.safetensors";
  at::Tensor v3 = random_codes(130, 260), v3_scale = at::rand({2, 3}) + 0.25;
  at::Tensor v4 = random_codes(130, 260);
  at::Tensor v4_scale = at::randint(115, 135, {2, 3}, at::kInt).to(at::kByte);
  at::Tensor fp4 = at::randint(-128, 128, {3, 32}, at::kInt).to(at::kChar);
  at::Tensor fp4_scale = at::randint(120, 130, {3, 2}, at::kInt).to(at::kByte);
  at::Tensor u8 = at::arange(4, at::kInt).to(at::kByte);
  struct Entry {
    std::string name, dtype;
    at::Tensor t;
  };
  std::vector<Entry> entries = {
      {"v3.weight", "F8_E4M3", v3},          {"v3.weight_scale_inv", "F32", v3_scale},
      {"v4.weight", "F8_E4M3", v4},          {"v4.weight_scale", "F8_E8M0", v4_scale},
      {"experts.w1.weight", "I8", fp4},      {"experts.w1.scale", "F8_E8M0", fp4_scale},
      {"plain", "U8", u8}};
  std::string header = "{", data;
  for (const auto& e : entries) {
    size_t bytes = size_t(e.t.numel()) * e.t.element_size();
    std::string shape;
    for (int64_t d : e.t.sizes()) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + ("\"" + e.name + "\":{\"dtype\":\"" + e.dtype +
              "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(data.size()) +
              "," + std::to_string(data.size() + bytes) + "]}");
    data.append(static_cast<const char*>(e.t.data_ptr()), bytes);
  }
  header += "}";
  {
    std::ofstream f(p, std::ios::binary);
    uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header << data;
  }

  SafetensorsFile f(p);
  for (const auto& e : entries) {
    EXPECT_EQ(f.info(e.name).stored_dtype, e.dtype) << e.name;
    EXPECT_EQ(f.read(e.name).scalar_type(), e.t.scalar_type()) << e.name;
  }
  EXPECT_EQ(f.info("v4.weight").dtype, at::kByte);
  EXPECT_EQ(f.info("v4.weight_scale").dtype, at::kByte);
  EXPECT_EQ(f.info("plain").dtype, at::kByte);

  // V3: float32 scale_inv; V4: E8M0.
  expect_same(dequantize_fp8_blocks(f.read("v3.weight"), f.read("v3.weight_scale_inv"), false,
                                    at::kFloat, "v3.weight"),
              naive_fp8(v3, v3_scale, 128).to(at::kFloat), "v3");
  at::Tensor v4_whole = dequantize_fp8_blocks(f.read("v4.weight"), f.read("v4.weight_scale"),
                                              true, at::kFloat, "v4.weight");
  expect_same(v4_whole, naive_fp8(v4, v4_scale, 128).to(at::kFloat), "v4");
  // A rank's rows read with read_rows, starting mid-block, and the whole scale.
  expect_same(dequantize_fp8_blocks(f.read_rows("v4.weight", 65, 64), f.read("v4.weight_scale"),
                                    true, at::kFloat, "v4.weight", 128, 65,
                                    f.info("v4.weight").shape[0]),
              v4_whole.narrow(0, 65, 64), "v4 rows 65+64");
  at::Tensor e = dequantize_fp4_e2m1(f.read("experts.w1.weight"), f.read("experts.w1.scale"),
                                     at::kFloat, "experts.w1.weight");
  EXPECT_EQ(e.sizes(), (std::vector<int64_t>{3, 64}));
  expect_same(e, naive_fp4(fp4.view(at::kByte), fp4_scale).to(at::kFloat), "fp4");
  expect_same(dequantize_fp4_e2m1(f.read_rows("experts.w1.weight", 1, 2),
                                  f.read_rows("experts.w1.scale", 1, 2), at::kFloat,
                                  "experts.w1.weight"),
              e.narrow(0, 1, 2), "fp4 rows 1+2");
}

TEST(QuantizedErrors, NameTheTensorAndTheProblem) {
  const std::string n = "model.layers.3.mlp.down_proj.weight";
  at::Tensor codes = at::full({130, 260}, 0x38, at::kByte);  // all 1.0
  at::Tensor s32 = at::ones({2, 3});
  at::Tensor s8 = at::full({2, 3}, 127, at::kByte);
  auto fp8 = [&](const at::Tensor& c, const at::Tensor& s, bool e8m0,
                 c10::ScalarType out = at::kFloat) {
    return [=] { dequantize_fp8_blocks(c, s, e8m0, out, n); };
  };
  // Shapes and dtypes.
  expect_error(fp8(codes, at::ones({2, 2}), false), n, {"[2, 2]", "expected [2, 3]", "[130, 260]"});
  expect_error(fp8(codes, at::ones({3, 3}), false), n, {"[3, 3]", "expected [2, 3]"});
  expect_error(fp8(codes, s8.view({3, 2}), true), n, {"expected [2, 3]"});
  expect_error(fp8(codes.to(at::kFloat), s32, false), n, {"codes", "Float", "F8_E4M3"});
  expect_error(fp8(codes.view(at::kChar), s32, false), n, {"codes", "Char"});
  expect_error(fp8(codes, s8, false), n, {"scales", "Byte", "expected Float"});
  expect_error(fp8(codes, s32, true), n, {"scales", "Float", "E8M0"});
  expect_error(fp8(codes, s32.to(at::kDouble), false), n, {"scales", "Double"});
  expect_error(fp8(codes.flatten(), s32, false), n, {"2-D", "[33800]"});
  expect_error(fp8(codes, s32, false, at::kLong), n, {"Long"});
  expect_error([&] { dequantize_fp8_blocks(codes, s32, false, at::kFloat, n, 0); }, n,
               {"block size"});
  expect_error([&] { dequantize_fp8_blocks(codes, s32, false, at::kFloat, n, 128, 10, 130); },
               n, {"rows [10, 140)", "130 rows"});
  expect_error([&] { dequantize_fp8_blocks(codes, s32, false, at::kFloat, n, 128, -1, 130); },
               n, {"out of range"});
  // Corrupted float32 scale_inv entries, each naming the block.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity(), -1.0f, 0.0f, -0.0f}) {
    at::Tensor s = s32.clone();
    s[1][2] = bad;
    SCOPED_TRACE(std::to_string(bad));
    expect_error(fp8(codes, s, false), n, {"scale_inv of block [1, 2]", "finite and positive"});
  }
  // The E8M0 NaN code, also in a block the row range does not use.
  at::Tensor s = s8.clone();
  s[1][2] = 0xFF;
  expect_error(fp8(codes, s, true), n, {"block [1, 2]", "0xFF"});
  expect_error(
      [&] { dequantize_fp8_blocks(codes.narrow(0, 0, 10), s, true, at::kFloat, n, 128, 0, 130); },
      n, {"block [1, 2]", "0xFF"});
  // NaN codes in the data, named by their index in the whole tensor.
  for (int nan : {0x7F, 0xFF}) {
    at::Tensor c = codes.clone();
    c[129][259] = nan;
    c[129][258] = 0x7E;
    expect_error(fp8(c, s32, false), n, {"NaN code", "element [129, 259]"});
    expect_error(fp8(c, s8, true, at::kBFloat16), n, {"NaN code", "element [129, 259]"});
    expect_error(
        [&] {
          dequantize_fp8_blocks(c.narrow(0, 120, 10), s32, false, at::kFloat, n, 128, 120, 130);
        },
        n, {"element [129, 259]"});
  }
  // A product out of the output dtype's range: 448 * 1000 in Half (max 65504), and
  // 448 * 2^127 in float.
  at::Tensor big = codes.clone();
  big[5][7] = 0x7E;
  at::Tensor s_big = s32.clone();
  s_big[0][0] = 1000.0f;
  expect_error(fp8(big, s_big, false, at::kHalf), n, {"element [5, 7]", "overflows", "Half"});
  EXPECT_NO_THROW(dequantize_fp8_blocks(big, s_big, false, at::kFloat, n));
  at::Tensor s8_big = s8.clone();
  s8_big[0][0] = 254;
  expect_error(fp8(big, s8_big, true), n, {"element [5, 7]", "overflows", "Float"});
  EXPECT_NO_THROW(dequantize_fp8_blocks(big, s8_big, true, at::kDouble, n));

  // FP4.
  const std::string e = "model.layers.3.mlp.experts.7.w2.weight";
  at::Tensor packed = at::full({3, 32}, 0x22, at::kByte);
  at::Tensor fs = at::full({3, 2}, 127, at::kByte);
  auto fp4 = [&](const at::Tensor& p, const at::Tensor& sc, c10::ScalarType out = at::kFloat) {
    return [=] { dequantize_fp4_e2m1(p, sc, out, e); };
  };
  expect_error(fp4(at::zeros({3, 31}, at::kByte), fs), e, {"packed width 31", "62 columns"});
  expect_error(fp4(at::zeros({3, 24}, at::kByte), fs), e, {"packed width 24"});
  expect_error(fp4(packed, at::full({3, 3}, 127, at::kByte)), e, {"[3, 3]", "expected [3, 2]"});
  expect_error(fp4(packed, at::full({2, 2}, 127, at::kByte)), e, {"[2, 2]", "expected [3, 2]"});
  expect_error(fp4(packed, fs.to(at::kFloat)), e, {"scales", "Float"});
  expect_error(fp4(packed.to(at::kFloat), fs), e, {"packed", "Float"});
  expect_error(fp4(packed, fs, at::kInt), e, {"Int"});
  at::Tensor fs_nan = fs.clone();
  fs_nan[2][1] = 0xFF;
  expect_error(fp4(packed, fs_nan), e, {"block [2, 1]", "0xFF"});
  at::Tensor fs_big = fs.clone();
  fs_big[1][1] = 254;  // 1.0 * 2^127 fits in float; 6 * 2^127 does not
  packed[1][20] = 0x72;
  expect_error(fp4(packed, fs_big), e, {"element [1, 41]", "overflows"});
}

}  // namespace
}  // namespace glint
