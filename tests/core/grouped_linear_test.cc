// The grouped expert GEMM with a fused LoRA against the plain computation written per
// expert (slices, matmul, the LoRA as its own product, joined), in float64: values and
// the gradients of x, w, the biases, A and B, with empty experts, an input-major weight's
// transposed view, and a frozen base weight (no gradient computed for it).
#include "core/grouped_linear.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <vector>

namespace glint {
namespace {

at::Tensor plain_grouped(const at::Tensor& x, const at::Tensor& w, const std::vector<int64_t>& counts,
                         const at::Tensor& A, const at::Tensor& B, double scale, const at::Tensor& bias) {
  std::vector<at::Tensor> parts;
  int64_t off = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    at::Tensor xe = x.narrow(0, off, counts[e]);
    at::Tensor ye = at::matmul(xe, w[e].t());
    if (bias.defined()) ye = ye + bias[e];
    if (A.defined()) ye = ye + scale * at::matmul(at::matmul(xe, A[e].t()), B[e].t());
    parts.push_back(ye);
    off += counts[e];
  }
  return at::cat(parts, 0);
}

TEST(GroupedLinear, FusedLoraMatchesThePlainPerExpertFormWithGradients) {
  at::manual_seed(11);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const int64_t in = 6, out = 5, r = 3;
  for (const std::vector<int64_t>& counts :
       std::vector<std::vector<int64_t>>{{3, 0, 4, 1}, {0, 0, 0, 2}, {2, 2, 2, 2}, {0, 0, 0, 0}}) {
    for (bool lora : {false, true})
      for (bool in_major : {false, true})
        for (bool frozen : {false, true})
          for (bool biased : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "counts " << counts[0] << "," << counts[1] << "," << counts[2] << ","
                                              << counts[3] << " lora " << lora << " in_major " << in_major
                                              << " frozen " << frozen << " biased " << biased);
            const int64_t E = int64_t(counts.size()), N = counts[0] + counts[1] + counts[2] + counts[3];
            at::Tensor x = at::randn({N, in}, f64).requires_grad_();
            at::Tensor stored = in_major ? at::randn({E, in, out}, f64) : at::randn({E, out, in}, f64);
            if (!frozen) stored.requires_grad_();
            at::Tensor w = in_major ? stored.transpose(1, 2) : stored;
            at::Tensor A = lora ? at::randn({E, r, in}, f64).requires_grad_() : at::Tensor();
            at::Tensor B = lora ? at::randn({E, out, r}, f64).requires_grad_() : at::Tensor();
            // The biases trained, as with --full (a LoRA run keeps them frozen).
            at::Tensor bias = biased ? at::randn({E, out}, f64).requires_grad_() : at::Tensor();
            at::Tensor got = grouped_linear(x, w, counts, A, B, 0.75, bias);
            at::Tensor want = plain_grouped(x, w, counts, A, B, 0.75, bias);
            ASSERT_EQ(got.sizes(), want.sizes());
            if (N > 0) EXPECT_LT((got - want).abs().max().item<double>(), 1e-12);
            std::vector<at::Tensor> inputs = {x};
            if (!frozen) inputs.push_back(stored);
            if (lora) inputs.insert(inputs.end(), {A, B});
            if (biased) inputs.push_back(bias);
            at::Tensor up = at::randn({N, out}, f64);
            auto g_got = torch::autograd::grad({got}, inputs, {up}, /*retain_graph=*/false, false, /*allow_unused=*/true);
            auto g_want = torch::autograd::grad({want}, inputs, {up}, false, false, /*allow_unused=*/true);
            for (size_t i = 0; i < inputs.size(); ++i) {
              ASSERT_TRUE(g_got[i].defined()) << "gradient " << i;  // empty experts' weights included
              at::Tensor expect = g_want[i].defined() ? g_want[i] : at::zeros_like(inputs[i]);
              if (expect.numel() > 0) EXPECT_LT((g_got[i] - expect).abs().max().item<double>(), 1e-12) << "gradient " << i;
            }
          }
  }
}

}  // namespace
}  // namespace glint
