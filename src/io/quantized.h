// Dequantisation of the quantised weight formats of DeepSeek-V3 and DeepSeek-V4
// checkpoints. SafetensorsFile reads the 1-byte float dtypes as c10::kByte raw codes
// (libtorch 1.13 has no float8); these functions turn codes and scales into weights.
//
// Legend: R rows and C columns of the logical weight W [R, C]; b the FP8 block edge.
//   FP8 blocks (V3, V4): codes    F8_E4M3 [R, C]
//                        scale    F32 "weight_scale_inv" or F8_E8M0 [ceil(R/b), ceil(C/b)]
//                        W[i, j] = e4m3(codes[i, j]) * scale[i / b, j / b]
//   FP4 experts (V4):    packed   I8 [R, C/2], byte k of a row = columns 2k (low nibble)
//                                 and 2k+1 (high nibble), each an E2M1 code
//                        scale    F8_E8M0 [R, C/32]
//                        W[i, j] = e2m1(nibble) * e8m0(scale[i, j / 32])
//
// Code formats:
//   E4M3 ("e4m3fn", OCP): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
//     subnormal (m/8 * 2^-6); no infinities; 0x7F and 0xFF are NaN; max 448.
//   E8M0 ("ue8m0"): unsigned byte s meaning 2^(s - 127); 0xFF is NaN.
//   E2M1: sign (bit 3), 2 exponent bits, 1 mantissa bit; magnitudes 0, 0.5, 1, 1.5, 2,
//     3, 4, 6 for codes 0..7, codes 8..15 their negatives.
//
// Errors: every function throws glint::Error whose message starts with `name` (the
// checkpoint key, say) for a wrong dtype, rank, device or shape (expected and found),
// a scale that is NaN, infinite, zero or negative (float32) or the E8M0 NaN code 0xFF
// (with the block's index), an E4M3 NaN code in the data (with the element's index),
// and a value that overflows the output dtype. No error ever leaves a partial result.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace glint {

// One code's value: NaN for the NaN codes (e4m3 0x7F/0xFF, e8m0 0xFF).
float e4m3_to_float(uint8_t code);
float e8m0_to_float(uint8_t code);
// REQUIRES: code < 16.
float e2m1_to_float(uint8_t code);

// FP8 block-scaled weights: rows [first_row, first_row + codes.size(0)) of a [total_rows, C]
// tensor, dequantised to `out` (kFloat, kBFloat16, kHalf or kDouble): [codes.size(0), C].
//   codes: kByte E4M3 codes [rows, C], on CPU (SafetensorsFile::read or read_rows).
//   scale: the WHOLE tensor's scale, [ceil(total_rows / block), ceil(C / block)], on CPU:
//          kFloat scale_inv (V3) when !scale_is_e8m0, kByte E8M0 codes (V4) when it is.
//          Every entry is checked, also those of blocks outside the row range.
//   total_rows: the whole tensor's rows; -1 means first_row + codes.size(0), which for
//          first_row = 0 is the whole tensor.
// A row range may start and end anywhere, in the middle of a block too. Products are
// rounded to float32 (exact with E8M0 scales), then to `out`; for kDouble they are exact.
at::Tensor dequantize_fp8_blocks(const at::Tensor& codes, const at::Tensor& scale,
                                 bool scale_is_e8m0, c10::ScalarType out,
                                 const std::string& name, int64_t block = 128,
                                 int64_t first_row = 0, int64_t total_rows = -1);

// FP4 E2M1 weights with 1x32 E8M0 scales, dequantised to `out` (as above): [R, C].
//   packed: kByte or kChar [R, C/2], on CPU; C/2 must be a multiple of 16.
//   scale:  kByte E8M0 codes [R, C/32], on CPU.
// A scale block never spans rows, so a row range needs no extra argument: pass the same
// rows of packed and scale (SafetensorsFile::read_rows on both keys).
at::Tensor dequantize_fp4_e2m1(const at::Tensor& packed, const at::Tensor& scale,
                               c10::ScalarType out, const std::string& name);

}  // namespace glint
