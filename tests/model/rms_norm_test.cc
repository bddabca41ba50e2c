// RMSNorm (plain, unit offset, gated by silu) against a naive per-vector loop in float64,
// its gradients against finite differences, float32 against float64, bf16 in its own
// dtype, the weight's gradient the same at one thread and two, and mismatched shapes.
#include "model/rms_norm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <array>
#include <cmath>
#include <vector>

#include "aten_threads.h"
#include "core/error.h"

namespace glint {
namespace {

const auto kNormF64 = at::TensorOptions().dtype(at::kDouble);

// The formula one vector at a time, by scalars.
at::Tensor naive(const at::Tensor& x, const at::Tensor& w, double eps, bool unit_offset, const at::Tensor& gate) {
  const int64_t D = x.size(-1), N = x.numel() / D;
  at::Tensor xs = x.contiguous().view({N, D}), out = at::empty({N, D}, kNormF64);
  at::Tensor gs = gate.defined() ? gate.contiguous().view({N, D}) : at::Tensor();
  auto xa = xs.accessor<double, 2>(), oa = out.accessor<double, 2>();
  auto wa = w.accessor<double, 1>();
  for (int64_t n = 0; n < N; ++n) {
    double squares = 0;
    for (int64_t d = 0; d < D; ++d) squares += xa[n][d] * xa[n][d];
    const double r = 1 / std::sqrt(squares / double(D) + eps);
    for (int64_t d = 0; d < D; ++d) {
      double v = xa[n][d] * r * (unit_offset ? 1 + wa[d] : wa[d]);
      if (gs.defined()) {
        const double z = gs[n][d].item<double>();
        v *= z / (1 + std::exp(-z));
      }
      oa[n][d] = v;
    }
  }
  return out.view(x.sizes());
}

struct Form {
  bool unit_offset, gated, views = false;
};

TEST(RmsNorm, MatchesTheNaiveLoopAndFiniteDifferencesInFloat64) {
  at::manual_seed(3);
  for (Form f : {Form{false, false}, Form{true, false}, Form{false, true}, Form{true, true}, Form{false, true, true}}) {
    SCOPED_TRACE(::testing::Message() << "unit_offset " << f.unit_offset << " gated " << f.gated << " views "
                                      << f.views);
    const double eps = 1e-6;
    // Views of wider tensors (as a projection's split output is) are read where they are.
    at::Tensor x = f.views ? at::randn({2, 3, 8}, kNormF64).requires_grad_(true).narrow(-1, 2, 5)
                           : at::randn({2, 3, 5}, kNormF64).requires_grad_(true);
    at::Tensor w = (at::randn({5}, kNormF64) * 0.3 + (f.unit_offset ? 0.0 : 1.0)).requires_grad_(true);
    at::Tensor z = !f.gated  ? at::Tensor()
                   : f.views ? at::randn({3, 2, 5}, kNormF64).requires_grad_(true).transpose(0, 1)
                             : at::randn({2, 3, 5}, kNormF64).requires_grad_(true);
    at::Tensor got = rms_norm(x, w, eps, f.unit_offset, z);
    EXPECT_LT((got - naive(x.detach(), w.detach(), eps, f.unit_offset, f.gated ? z.detach() : at::Tensor()))
                  .abs()
                  .max()
                  .item<double>(),
              1e-14);
    at::Tensor R = at::randn(got.sizes(), kNormF64);
    std::vector<at::Tensor> inputs = {x, w};
    if (f.gated) inputs.push_back(z);
    auto grads = torch::autograd::grad({(got * R).sum()}, inputs);
    auto loss = [&](int which, int64_t i, double step) {
      std::vector<at::Tensor> v;
      for (const at::Tensor& t : inputs) v.push_back(t.detach().clone(at::MemoryFormat::Contiguous));
      v[which].view(-1)[i] += step;
      return (naive(v[0], v[1], eps, f.unit_offset, f.gated ? v[2] : at::Tensor()) * R).sum().item<double>();
    };
    const double h = 1e-6;
    for (size_t which = 0; which < inputs.size(); ++which)
      for (int64_t i = 0; i < inputs[which].numel(); ++i)
        EXPECT_NEAR(grads[which].reshape(-1)[i].item<double>(),
                    (loss(int(which), i, h) - loss(int(which), i, -h)) / (2 * h), 1e-7)
            << "input " << which << " element " << i;
  }
}

TEST(RmsNorm, Float32AgreesWithFloat64Bf16KeepsItsDtypeAndThreadsDoNotChangeTheSums) {
  at::manual_seed(4);
  // 150 vectors: more than one block of the weight's gradient.
  at::Tensor x = at::randn({3, 50, 48}, kNormF64), w = at::randn({48}, kNormF64) * 0.2 + 1, z = at::randn({3, 50, 48}, kNormF64);
  at::Tensor R = at::randn(x.sizes(), kNormF64);
  auto run = [&](c10::ScalarType dtype) {
    at::Tensor xs = x.to(dtype).detach().requires_grad_(true), ws = w.to(dtype).detach().requires_grad_(true),
               zs = z.to(dtype).detach().requires_grad_(true);
    at::Tensor out = rms_norm(xs, ws, 1e-6, false, zs);
    (out * R.to(dtype)).sum().backward();
    return std::array<at::Tensor, 4>{out.detach().to(at::kDouble), xs.grad().to(at::kDouble),
                                     ws.grad().to(at::kDouble), zs.grad().to(at::kDouble)};
  };
  const auto f64 = run(at::kDouble), f32 = run(at::kFloat);
  for (int i = 0; i < 4; ++i)
    EXPECT_LT((f32[i] - f64[i]).abs().max().item<double>() / f64[i].abs().max().item<double>(), 1e-5)
        << "output / dx / dw / dgate " << i;
  const auto bf16 = rms_norm(x.to(at::kBFloat16), w.to(at::kBFloat16), 1e-6, false, z.to(at::kBFloat16));
  EXPECT_EQ(bf16.scalar_type(), at::kBFloat16);
  EXPECT_LT((bf16.to(at::kDouble) - f64[0]).abs().max().item<double>() / f64[0].abs().max().item<double>(), 2e-2);

  const auto one = testing::with_aten_threads(1, [&] { return run(at::kFloat); });
  const auto two = testing::with_aten_threads(2, [&] { return run(at::kFloat); });
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(at::equal(one[i], two[i])) << "output / dx / dw / dgate " << i;
}

TEST(RmsNorm, RejectsMismatchedShapes) {
  at::Tensor x = at::randn({2, 4}, kNormF64), w = at::ones({4}, kNormF64);
  EXPECT_THROW(rms_norm(x, at::ones({3}, kNormF64), 1e-6, false), Error);
  EXPECT_THROW(rms_norm(x, w, 1e-6, false, at::randn({2, 3}, kNormF64)), Error);
  EXPECT_NO_THROW(rms_norm(x, w, 1e-6, false, at::randn({2, 4}, kNormF64)));
}

}  // namespace
}  // namespace glint
