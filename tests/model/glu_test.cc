// The GLU activation's float32 CPU kernels (one pass forward, one backward) against the
// float64 formula: SwiGLU, the clamped forms (DeepSeek-V4's limit; gpt-oss's limit,
// alpha and offset), on halves, interleaved columns and two separate tensors, with
// values beyond the limits, exactly at them, far into the sigmoid's tails, and NaN.
#include "model/mlp.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <limits>

namespace glint {
namespace {

// [N, 2I] inputs in [-12, 12], with some at +-limit and some far out (-100, 100).
at::Tensor inputs(int64_t N, int64_t I, double limit) {
  at::Tensor h = at::rand({N, 2 * I}, at::kDouble) * 24 - 12;
  if (limit > 0) {
    h.index_put_({0, at::indexing::Slice(0, 2 * I, 3)}, limit);
    h.index_put_({1, at::indexing::Slice(1, 2 * I, 3)}, -limit);
  }
  h.index_put_({2, at::indexing::Slice(0, 2 * I, 5)}, -100.0);
  h.index_put_({3, at::indexing::Slice(0, 2 * I, 7)}, 100.0);
  return h;
}

// |got - want| <= 1e-5 (1 + |want|) everywhere: float32's noise on these magnitudes.
void expect_close(const at::Tensor& got, const at::Tensor& want, const char* what) {
  const at::Tensor err = (got.to(at::kDouble) - want).abs() - 1e-5 * (1 + want.abs());
  EXPECT_LE(err.max().item<double>(), 0) << what << ": worst excess " << err.max().item<double>();
}

TEST(Glu, Float32KernelsMatchTheFloat64Formula) {
  at::manual_seed(11);
  const int64_t N = 37, I = 45;
  for (const Glu& form : {Glu{}, Glu{1.5}, Glu{7.0, 1.702, 1.0}})
    for (int layout = 0; layout < 3; ++layout) {  // halves, interleaved, two tensors
      SCOPED_TRACE(::testing::Message() << "limit " << form.limit << " alpha " << form.alpha << " layout " << layout);
      const at::Tensor h64 = inputs(N, I, form.limit);
      const at::Tensor w64 = at::randn({N, I}, at::kDouble);  // d loss / d out
      auto run = [&](at::ScalarType t) {
        at::Tensor h = h64.to(t).requires_grad_();
        at::Tensor out;
        if (layout < 2) {
          out = glu_packed(h, layout == 1, form);
        } else {
          at::Tensor gate = h.narrow(1, 0, I).contiguous(), up = h.narrow(1, I, I).contiguous();
          out = glu(gate, up, form);
        }
        at::Tensor grad = torch::autograd::grad({out}, {h}, {w64.to(t)})[0];
        return std::pair{out.detach(), grad};
      };
      auto [out64, grad64] = run(at::kDouble);
      auto [out32, grad32] = run(at::kFloat);
      expect_close(out32, out64, "value");
      expect_close(grad32, grad64, "gradient");
    }
}

TEST(Glu, Float32KernelKeepsNaN) {
  at::Tensor gate = at::tensor({std::numeric_limits<float>::quiet_NaN(), 1.f, 2.f});
  at::Tensor up = at::tensor({1.f, std::numeric_limits<float>::quiet_NaN(), 3.f});
  at::Tensor out = glu(gate, up, Glu{7.0, 1.702, 1.0});
  EXPECT_TRUE(std::isnan(out[0].item<float>()));
  EXPECT_TRUE(std::isnan(out[1].item<float>()));
  EXPECT_NEAR(out[2].item<float>(), 2.0 / (1 + std::exp(-1.702 * 2)) * 4.0, 1e-5);
}

TEST(Glu, Float32KernelOverLeadingDimensionsAndStridedViews) {
  at::manual_seed(12);
  const Glu form{7.0, 1.702, 1.0};
  const at::Tensor g64 = at::randn({3, 4, 10}, at::kDouble) * 4, u64 = at::randn({3, 4, 10}, at::kDouble) * 4;
  const at::Tensor want = glu(g64, u64, form);
  expect_close(glu(g64.to(at::kFloat), u64.to(at::kFloat), form), want, "[3, 4, I]");
  // Rows that do not fold (a transposed view): the same values by the general path.
  const at::Tensor gt = g64.to(at::kFloat).transpose(0, 1), ut = u64.to(at::kFloat).transpose(0, 1);
  expect_close(glu(gt, ut, form), want.transpose(0, 1), "transposed");
}

}  // namespace
}  // namespace glint
