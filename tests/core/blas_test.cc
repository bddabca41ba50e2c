// The batched GEMM against a naive triple loop in float64: every layout of the operands
// (row- and column-major, neither, broadcast along the batch), outputs that are views,
// alpha and beta, NaN in an output that beta = 0 must not read, empty products, and one
// thread against two.
#include "core/blas.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <limits>
#include <string>

#include "aten_threads.h"

namespace glint {
namespace {

// beta out0 + alpha a b, one multiply-add at a time.
at::Tensor naive(const at::Tensor& out0, const at::Tensor& a, const at::Tensor& b, double alpha, double beta) {
  const at::Tensor A = a.to(at::kDouble).contiguous(), B = b.to(at::kDouble).contiguous();
  at::Tensor C = out0.to(at::kDouble).contiguous();
  auto pa = A.accessor<double, 3>();
  auto pb = B.accessor<double, 3>();
  auto pc = C.accessor<double, 3>();
  for (int64_t i = 0; i < A.size(0); ++i)
    for (int64_t r = 0; r < A.size(1); ++r)
      for (int64_t c = 0; c < B.size(2); ++c) {
        double sum = 0;
        for (int64_t j = 0; j < A.size(2); ++j) sum += pa[i][r][j] * pb[i][j][c];
        pc[i][r][c] = (beta == 0 ? 0.0 : beta * pc[i][r][c]) + alpha * sum;
      }
  return C;
}

// [N, r, c] in `form`: row-major, column-major (a transposed view), neither (every other
// element of a larger tensor), or one matrix repeated along the batch (stride 0).
at::Tensor operand(int64_t N, int64_t r, int64_t c, const std::string& form, at::ScalarType dtype) {
  const auto o = at::TensorOptions().dtype(dtype);
  if (form == "row") return at::randn({N, r, c}, o);
  if (form == "column") return at::randn({N, c, r}, o).transpose(1, 2);
  if (form == "strided") return at::randn({N, 2 * r, 2 * c}, o).slice(1, 0, 2 * r, 2).slice(2, 0, 2 * c, 2);
  return at::randn({1, r, c}, o).expand({N, r, c});  // "broadcast"
}

double tolerance(at::ScalarType dtype) { return dtype == at::kDouble ? 1e-12 : 1e-4; }

TEST(BatchedGemm, MatchesANaiveLoopForEveryLayout) {
  at::manual_seed(3);
  const int64_t N = 5, m = 3, k = 7, n = 4;
  for (at::ScalarType dtype : {at::kFloat, at::kDouble})
    for (const char* fa : {"row", "column", "strided", "broadcast"})
      for (const char* fb : {"row", "column", "strided"})
        for (const char* fo : {"row", "column", "wide"})
          for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{-0.5, 1.0}, std::pair{2.0, 0.25}}) {
            SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << " a " << fa << " b " << fb << " out " << fo
                                              << " alpha " << alpha << " beta " << beta);
            const at::Tensor a = operand(N, m, k, fa, dtype), b = operand(N, k, n, fb, dtype);
            const auto o = at::TensorOptions().dtype(dtype);
            // "wide": rows 2n + 1 apart, the product written into columns [1, n + 1)
            const at::Tensor whole = std::string(fo) == "row"      ? at::randn({N, m, n}, o)
                                     : std::string(fo) == "column" ? at::randn({N, n, m}, o)
                                                                   : at::randn({N, m, 2 * n + 1}, o);
            const at::Tensor out = std::string(fo) == "row"      ? whole
                                   : std::string(fo) == "column" ? whole.transpose(1, 2)
                                                                 : whole.narrow(2, 1, n);
            const at::Tensor before = whole.clone();
            const at::Tensor expected = naive(out, a, b, alpha, beta);
            blas::batched_gemm(out, a, b, alpha, beta);
            EXPECT_TRUE(at::allclose(out.to(at::kDouble), expected, tolerance(dtype), tolerance(dtype)));
            if (std::string(fo) == "wide") {  // what lies beside the product is untouched
              EXPECT_TRUE(at::equal(whole.narrow(2, 0, 1), before.narrow(2, 0, 1)));
              EXPECT_TRUE(at::equal(whole.narrow(2, n + 1, n), before.narrow(2, n + 1, n)));
            }
          }
}

TEST(BatchedGemm, BetaZeroDoesNotReadTheOutput) {
  at::manual_seed(4);
  const at::Tensor a = at::randn({6, 8, 5}), b = at::randn({6, 5, 9});
  at::Tensor out = at::full({6, 8, 9}, std::numeric_limits<float>::quiet_NaN());
  blas::batched_gemm(out, a, b, 1.5, 0.0);
  EXPECT_TRUE(at::allclose(out.to(at::kDouble), naive(at::zeros({6, 8, 9}), a, b, 1.5, 0.0), 1e-4, 1e-4));
}

TEST(BatchedGemm, EmptyAndSingleProducts) {
  at::manual_seed(5);
  {  // k = 0: out = beta out
    at::Tensor out = at::randn({3, 2, 4});
    const at::Tensor before = out.clone();
    blas::batched_gemm(out, at::randn({3, 2, 0}), at::randn({3, 0, 4}), 1.0, 0.5);
    EXPECT_TRUE(at::allclose(out, before * 0.5));
    blas::batched_gemm(out, at::randn({3, 2, 0}), at::randn({3, 0, 4}), 1.0, 0.0);
    EXPECT_TRUE(at::equal(out, at::zeros_like(out)));
  }
  {  // no matrices, no rows
    at::Tensor out = at::empty({0, 2, 4});
    blas::batched_gemm(out, at::randn({0, 2, 3}), at::randn({0, 3, 4}));
    at::Tensor rows = at::empty({2, 0, 4});
    blas::batched_gemm(rows, at::randn({2, 0, 3}), at::randn({2, 3, 4}));
  }
  {  // one matrix
    const at::Tensor a = at::randn({1, 4, 6}, at::kDouble), b = at::randn({1, 6, 3}, at::kDouble);
    at::Tensor out = at::randn({1, 4, 3}, at::kDouble);
    const at::Tensor expected = naive(out, a, b, 2.0, 1.0);
    blas::batched_gemm(out, a, b, 2.0, 1.0);
    EXPECT_TRUE(at::allclose(out, expected, 1e-12, 1e-12));
  }
}

TEST(BatchedGemm, OneThreadAndTwoAgree) {
  at::manual_seed(6);
  const at::Tensor a = at::randn({64, 16, 32}), b = at::randn({64, 32, 24});
  const at::Tensor one = testing::with_aten_threads(1, [&] { return blas::batched_matmul(a, b); });
  const at::Tensor two = testing::with_aten_threads(2, [&] { return blas::batched_matmul(a, b); });
  EXPECT_TRUE(at::allclose(one, two, 1e-6, 1e-6));
  EXPECT_TRUE(at::allclose(two.to(at::kDouble), naive(at::zeros({64, 16, 24}), a, b, 1.0, 0.0), 1e-4, 1e-4));
}

// x with a x = b, a triangular, by substitution one row at a time.
at::Tensor naive_solve(const at::Tensor& a, const at::Tensor& b, bool upper, bool unit_diagonal) {
  const at::Tensor A = a.to(at::kDouble).contiguous();
  at::Tensor X = b.to(at::kDouble).contiguous();
  auto pa = A.accessor<double, 3>();
  auto px = X.accessor<double, 3>();
  const int64_t m = A.size(1);
  for (int64_t i = 0; i < A.size(0); ++i)
    for (int64_t step = 0; step < m; ++step) {
      const int64_t r = upper ? m - 1 - step : step;
      for (int64_t c = 0; c < X.size(2); ++c) {
        double v = px[i][r][c];
        for (int64_t j = upper ? r + 1 : 0; j < (upper ? m : r); ++j) v -= pa[i][r][j] * px[i][j][c];
        px[i][r][c] = unit_diagonal ? v : v / pa[i][r][r];
      }
    }
  return X;
}

TEST(BatchedSolveTriangular, MatchesSubstitutionForEveryLayout) {
  at::manual_seed(8);
  const int64_t N = 4, m = 6, n = 5;
  for (at::ScalarType dtype : {at::kFloat, at::kDouble})
    for (bool upper : {false, true})
      for (bool unit : {false, true})
        for (const char* fa : {"row", "column", "strided"})
          for (const char* fb : {"row", "column"}) {
            SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << " upper " << upper << " unit " << unit
                                              << " a " << fa << " b " << fb);
            // A well-conditioned triangle; the other triangle (and a unit diagonal) hold
            // values that must not be read.
            at::Tensor a = operand(N, m, m, fa, dtype);
            const at::Tensor eye = at::eye(m, at::TensorOptions().dtype(dtype));
            a.copy_(a * 0.2 + eye * (unit ? 7.0 : 2.0));
            at::Tensor b = operand(N, m, n, fb, dtype);
            const at::Tensor expected = naive_solve(upper ? a.triu() : a.tril(), b, upper, unit);
            blas::batched_solve_triangular(a, b, upper, unit);
            EXPECT_TRUE(at::allclose(b.to(at::kDouble), expected, tolerance(dtype), tolerance(dtype)));
          }
}

// Where libtorch's BLAS is OpenBLAS (Debian's builds), the products are glint's own calls,
// and OpenBLAS's own thread count is as it was after them.
TEST(BatchedGemm, CallsOpenBlasWhereLibtorchUsesItAndRestoresItsThreads) {
  using GetThreads = int (*)();
  const auto threads = reinterpret_cast<GetThreads>(::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!threads) GTEST_SKIP() << "libtorch's BLAS is not OpenBLAS here: ATen's products run";
  EXPECT_TRUE(blas::calls_openblas());
  blas::set_threads(2);
  at::Tensor out = at::empty({4, 3, 5});
  blas::batched_gemm(out, at::randn({4, 3, 6}), at::randn({4, 6, 5}));
  at::Tensor b = at::randn({4, 3, 2});
  blas::batched_solve_triangular(at::eye(3).expand({4, 3, 3}), b, /*upper=*/false, /*unit_diagonal=*/true);
  EXPECT_EQ(threads(), 2);
  blas::set_threads(at::get_num_threads());
}

TEST(BatchedMatmul, FourDimensionalViews) {
  at::manual_seed(7);
  const at::Tensor a = at::randn({3, 4, 5, 6}, at::kDouble), b = at::randn({3, 4, 7, 6}, at::kDouble);
  const at::Tensor out = blas::batched_matmul(a, b.transpose(-1, -2));
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{3, 4, 5, 7}));
  const at::Tensor expected =
      naive(at::zeros({12, 5, 7}, at::kDouble), a.reshape({12, 5, 6}), b.reshape({12, 7, 6}).transpose(1, 2), 1.0, 0.0);
  EXPECT_TRUE(at::allclose(out.reshape({12, 5, 7}), expected, 1e-12, 1e-12));
}

}  // namespace
}  // namespace glint
