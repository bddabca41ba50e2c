// The experts' projection over tokens grouped by expert, written into one output: each
// expert's GEMM over its contiguous slice of rows goes straight into its rows of the
// result (no per-expert outputs joined afterwards, in forward or backward), and a LoRA
// on the packed weight adds its two thin GEMMs on the same slices in place.
//
// Legend: N grouped rows, E local experts, in / out features, r LoRA rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace glint {

// y[rows of e] = x_e W_eᵀ + b_e + scale (x_e A_eᵀ) B_eᵀ for x [N, in] grouped by expert
// (counts[e] rows each, in order), w [E, out, in] (any strides: an input-major weight's
// transposed view works as is), bias [E, out] (undefined: none; each GEMM starts from its
// expert's row, so no [N, out] copy of the biases is made), lora_A [E, r, in] and lora_B
// [E, out, r] (both undefined: no LoRA) -> [N, out]. Differentiable in x, w, bias, lora_A
// and lora_B; only the gradients asked for are computed (a frozen base weight costs no
// weight gradient). Every expert's tensors stay in the autograd graph when it has no rows
// (expert parallelism relies on it).
at::Tensor grouped_linear(const at::Tensor& x, const at::Tensor& w, const std::vector<int64_t>& counts,
                          const at::Tensor& lora_A = at::Tensor(), const at::Tensor& lora_B = at::Tensor(),
                          double scale = 1.0, const at::Tensor& bias = at::Tensor());

}  // namespace glint
