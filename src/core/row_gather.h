// Rows gathered with a fixed fan-out, and their weighted sums back: the two moves of a
// mixture of experts' token copies (each of T tokens copied to K experts, the copies in
// any order) with backwards that gather instead of scatter.
//
// Both take the fan-out twice: `index` [N], the source row of each gathered row, and
// `readers` [M, R] (N = M R), for each source row the R gathered rows that read it (the
// inverse of `index`, reshaped). Where `index` is a permutation, R = 1.
//
// On the CPU (float, double) each runs as one pass over its rows spread over ATen's
// threads, and so does its backward: every output row is written by one thread, so
// there is no scatter-add (ATen's index_add_ adds row after row on one thread), no
// zero-filled [M, H] to add into, and the order of each sum is fixed (the readers'
// order). Elsewhere (core/cpu_kernels.h) they are ATen's index_select / index_add, which
// keep more for backward: the weighted copy of the rows.
#pragma once

#include <ATen/core/Tensor.h>

namespace glint {

// x [M, H] -> x[index] [N, H]. Differentiable in x: its gradient sums, for each source
// row, the gradients of its R readers.
at::Tensor gather_rows(const at::Tensor& x, const at::Tensor& index, const at::Tensor& readers);

// rows [N, H], weight [N] -> [M, H], row m the sum over its readers n of weight[n] rows[n].
// Differentiable in rows (d rows[n] = weight[n] d out[index[n]]) and in weight (the dot
// product of rows[n] and d out[index[n]]), both in one pass.
at::Tensor weighted_row_sum(const at::Tensor& rows, const at::Tensor& weight, const at::Tensor& index,
                            const at::Tensor& readers);

}  // namespace glint
