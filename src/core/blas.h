// The BLAS behind libtorch, called directly where ATen's own calls cost more than the
// products: many small matrix products at once.
#pragma once

#include <ATen/core/Tensor.h>

namespace glint::blas {

// Threads for the BLAS's own pool, where it keeps one (OpenBLAS built with pthreads);
// nothing otherwise.
void set_threads(int threads);

// out = beta out + alpha (a b) for every i of the leading dimension: a [N, m, k],
// b [N, k, n], out [N, m, n], CPU, float or double, the same dtype; each matrix row- or
// column-major (other layouts are copied first), any stride between matrices. Not
// differentiable: for code that runs without autograd (a custom function's forward and
// backward). With beta = 0, out is only written (NaN in it is not read).
//
// Where libtorch's BLAS is OpenBLAS, the N products run spread over ATen's intra-op
// threads, one single-threaded BLAS call each: libtorch's CPU bmm without MKL runs them
// one after another, each split over the threads, which for small matrices (the
// DeltaNet chunks' [64 x 128] x [128 x 128]) reaches half the rate. Elsewhere (MKL, CUDA,
// other dtypes) it is ATen's baddbmm.
void batched_gemm(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, double alpha = 1.0,
                  double beta = 0.0);

// Whether batched_gemm and batched_solve_triangular call OpenBLAS themselves (libtorch's
// BLAS is OpenBLAS), rather than ATen.
bool calls_openblas();

// b <- a^-1 b for every i of the leading dimension: a [N, m, m] upper or lower triangular
// (the other triangle is not read, nor the diagonal when it is taken as ones), b [N, m, n];
// CPU, float or double. Spread over the threads as batched_gemm is; elsewhere ATen's
// linalg_solve_triangular. Not differentiable.
void batched_solve_triangular(const at::Tensor& a, const at::Tensor& b, bool upper, bool unit_diagonal);

// a [..., m, k] x b [..., k, n] -> [..., m, n] by batched_gemm over the leading
// dimensions (views where their strides merge). The same limits.
at::Tensor batched_matmul(const at::Tensor& a, const at::Tensor& b);

}  // namespace glint::blas
