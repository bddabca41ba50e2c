// Rows gathered with a fixed fan-out and summed back, forward and backward, against
// naive loops in float64 (and ATen's index_select / index_add within float32's noise);
// a permutation (fan-out 1); no rows at all; without gradients.
#include "core/row_gather.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

namespace glint {
namespace {

// A random fan-out: M source rows, each read by R of the N = M R gathered rows.
struct FanOut {
  at::Tensor index;    // [N] source row of each gathered row
  at::Tensor readers;  // [M, R]
};

FanOut random_fan_out(int64_t M, int64_t R) {
  FanOut f;
  f.readers = at::randperm(M * R, at::kLong).view({M, R});
  f.index = at::empty({M * R}, at::kLong);
  auto rd = f.readers.accessor<int64_t, 2>();
  auto ix = f.index.accessor<int64_t, 1>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t r = 0; r < R; ++r) ix[rd[m][r]] = m;
  return f;
}

TEST(RowGather, WeightedSumAndGatherMatchNaiveLoopsForwardAndBackward) {
  at::manual_seed(5);
  for (auto [M, R, H] : {std::tuple<int64_t, int64_t, int64_t>{7, 3, 5}, {64, 8, 33}, {9, 1, 16}, {0, 4, 8}}) {
    SCOPED_TRACE(::testing::Message() << "M " << M << " R " << R << " H " << H);
    const FanOut f = random_fan_out(M, R);
    const int64_t N = M * R;
    const auto o = at::TensorOptions().dtype(at::kDouble);
    at::Tensor x = at::randn({M, H}, o).requires_grad_();
    at::Tensor rows = at::randn({N, H}, o).requires_grad_();
    at::Tensor weight = at::randn({N}, o).requires_grad_();
    const at::Tensor g_sum = at::randn({M, H}, o), g_gather = at::randn({N, H}, o);

    const at::Tensor gathered = gather_rows(x, f.index, f.readers);
    const at::Tensor summed = weighted_row_sum(rows, weight, f.index, f.readers);
    auto grads = torch::autograd::grad({gathered, summed}, {x, rows, weight}, {g_gather, g_sum});

    at::Tensor want_gathered = at::zeros({N, H}, o), want_summed = at::zeros({M, H}, o);
    at::Tensor want_dx = at::zeros({M, H}, o), want_drows = at::zeros({N, H}, o), want_dw = at::zeros({N}, o);
    auto ix = f.index.accessor<int64_t, 1>();
    const at::Tensor xd = x.detach(), rd = rows.detach(), wd = weight.detach();
    auto X = xd.accessor<double, 2>();
    auto Y = rd.accessor<double, 2>();
    auto W = wd.accessor<double, 1>();
    auto GS = g_sum.accessor<double, 2>();
    auto GG = g_gather.accessor<double, 2>();
    auto wg = want_gathered.accessor<double, 2>();
    auto ws = want_summed.accessor<double, 2>();
    auto wdx = want_dx.accessor<double, 2>();
    auto wdr = want_drows.accessor<double, 2>();
    auto wdw = want_dw.accessor<double, 1>();
    for (int64_t n = 0; n < N; ++n) {
      const int64_t m = ix[n];
      for (int64_t h = 0; h < H; ++h) {
        wg[n][h] = X[m][h];
        ws[m][h] += W[n] * Y[n][h];
        wdx[m][h] += GG[n][h];
        wdr[n][h] = W[n] * GS[m][h];
        wdw[n] += Y[n][h] * GS[m][h];
      }
    }
    EXPECT_TRUE(at::allclose(gathered, want_gathered, 0, 0));
    EXPECT_TRUE(at::allclose(summed, want_summed, 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(grads[0], want_dx, 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(grads[1], want_drows, 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(grads[2], want_dw, 1e-12, 1e-12));
  }
}

TEST(RowGather, Float32AgreesWithIndexAddAndWithoutGradients) {
  at::manual_seed(6);
  const int64_t M = 300, R = 4, H = 130, N = M * R;
  const FanOut f = random_fan_out(M, R);
  at::Tensor rows = at::randn({N, H}).requires_grad_();
  at::Tensor weight = at::rand({N}).requires_grad_();
  const at::Tensor g = at::randn({M, H});
  const at::Tensor out = weighted_row_sum(rows, weight, f.index, f.readers);
  auto got = torch::autograd::grad({out}, {rows, weight}, {g});
  // ATen's form of the same sums, differentiated by autograd.
  const at::Tensor ref = at::zeros({M, H}).index_add(0, f.index, rows * weight.unsqueeze(1));
  auto want = torch::autograd::grad({ref}, {rows, weight}, {g});
  EXPECT_TRUE(at::allclose(out, ref, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(got[0], want[0], 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(got[1], want[1], 1e-4, 1e-4));
  // Without gradients: the same values, no graph.
  at::NoGradGuard no_grad;
  const at::Tensor plain = weighted_row_sum(rows, weight, f.index, f.readers);
  EXPECT_FALSE(plain.requires_grad());
  EXPECT_TRUE(at::equal(plain, out.detach()));
}

}  // namespace
}  // namespace glint
