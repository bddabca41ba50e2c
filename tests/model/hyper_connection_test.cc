// Hyper-connections (model/hyper_connection.h) against a per-token loop of the header's
// formulas in float64, forward and gradients (central differences of that loop), on the
// CPU kernels and on ATen's operators; float32 against float64; bf16 keeps its dtype.
//
// Legend: B rows, S positions, n streams, H hidden.
#include "model/hyper_connection.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/compat.h"
#include "core/cpu_kernels.h"

namespace glint {
namespace {

const auto kHcF64 = at::TensorOptions().dtype(at::kDouble);

struct HcParams {
  at::Tensor fn, base, scale, sub;  // sub [H, H]: the sublayer y = tanh(x sub)
};

// One token: X [n, H] -> X' [n, H], written from the formulas with scalar loops.
at::Tensor token_reference(const at::Tensor& X, const HcParams& p, int64_t iters, double eps, double norm_eps) {
  const int64_t n = X.size(0), H = X.size(1);
  const at::Tensor f = X.reshape({n * H});
  double ms = 0;
  for (int64_t i = 0; i < n * H; ++i) ms += f[i].item<double>() * f[i].item<double>();
  const at::Tensor normed = f / std::sqrt(ms / double(n * H) + norm_eps);
  const at::Tensor m = at::mv(p.fn, normed);  // [(2+n) n]
  auto sig = [](const at::Tensor& t) { return 1 / (1 + at::exp(-t)); };
  const at::Tensor pre = sig(m.narrow(0, 0, n) * p.scale[0] + p.base.narrow(0, 0, n)) + eps;
  const at::Tensor post = 2 * sig(m.narrow(0, n, n) * p.scale[1] + p.base.narrow(0, n, n));
  at::Tensor logits = (m.narrow(0, 2 * n, n * n) * p.scale[2] + p.base.narrow(0, 2 * n, n * n)).view({n, n});
  std::vector<at::Tensor> rows;
  for (int64_t r = 0; r < n; ++r) {
    const at::Tensor e = at::exp(logits[r] - logits[r].max());
    rows.push_back(e / e.sum() + eps);
  }
  at::Tensor C = at::stack(rows, 0);
  auto columns = [&](const at::Tensor& c) { return c / (c.sum(0, true) + eps); };
  auto by_rows = [&](const at::Tensor& c) { return c / (c.sum(1, true) + eps); };
  C = columns(C);
  for (int64_t i = 1; i < iters; ++i) C = columns(by_rows(C));
  at::Tensor x = at::zeros({H}, X.options());
  for (int64_t i = 0; i < n; ++i) x = x + pre[i] * X[i];
  const at::Tensor y = at::tanh(at::mv(p.sub.t(), x));
  std::vector<at::Tensor> out;
  for (int64_t k = 0; k < n; ++k) {
    at::Tensor o = post[k] * y;
    for (int64_t j = 0; j < n; ++j) o = o + C[j][k] * X[j];
    out.push_back(o);
  }
  return at::stack(out, 0);
}

at::Tensor reference(const at::Tensor& X, const HcParams& p, int64_t iters, double eps, double norm_eps) {
  std::vector<at::Tensor> tokens;
  const at::Tensor flat = X.reshape({-1, X.size(-2), X.size(-1)});
  for (int64_t t = 0; t < flat.size(0); ++t) tokens.push_back(token_reference(flat[t], p, iters, eps, norm_eps));
  return at::stack(tokens, 0).view(X.sizes());
}

TEST(HyperConnection, MatchesTheFormulasForwardAndBackwardOnBothPaths) {
  at::manual_seed(21);
  const int64_t B = 2, S = 3, n = 3, H = 5, iters = 3;
  const double eps = 1e-3, norm_eps = 1e-6;
  HyperConnection hc(n, H, iters, eps, norm_eps, TensorPlacement{at::kDouble, c10::Device(c10::kCPU)});
  HcParams p{at::randn({(2 + n) * n, n * H}, kHcF64) * 0.5, at::randn({(2 + n) * n}, kHcF64),
             at::rand({3}, kHcF64) + 0.5, at::randn({H, H}, kHcF64) * 0.5};
  {
    at::NoGradGuard no_grad;
    hc->fn.copy_(p.fn);
    hc->base.copy_(p.base);
    hc->scale.copy_(p.scale);
  }
  const at::Tensor X0 = at::randn({B, S, n, H}, kHcF64);
  const at::Tensor R = at::randn({B, S, n, H}, kHcF64);
  const at::Tensor want = reference(X0, p, iters, eps, norm_eps);
  const double loss_want = (want * R).sum().item<double>();

  // Central differences of the reference for a few entries of X, fn, base, scale, sub.
  auto numeric = [&](int which, int64_t index) {
    const double h = 1e-6;
    double at_sign[2];
    for (int s = 0; s < 2; ++s) {
      HcParams q{p.fn.clone(), p.base.clone(), p.scale.clone(), p.sub.clone()};
      at::Tensor X = X0.clone();
      at::Tensor* t[] = {&X, &q.fn, &q.base, &q.scale, &q.sub};
      t[which]->view(-1)[index] += s == 0 ? h : -h;
      at_sign[s] = (reference(X, q, iters, eps, norm_eps) * R).sum().item<double>();
    }
    return (at_sign[0] - at_sign[1]) / (2 * h);
  };
  const std::vector<std::pair<int, std::vector<int64_t>>> probes = {
      {0, {0, 7, 44, 89}}, {1, {0, 13, 74}}, {2, {0, 4, 11}}, {3, {0, 1, 2}}, {4, {0, 12, 24}}};

  at::Tensor outs[2];
  for (int path = 0; path < 2; ++path) {
    SCOPED_TRACE(path == 0 ? "kernels" : "ATen");
    std::optional<AtenOperatorsOnly> aten_only;
    if (path == 1) aten_only.emplace();
    at::Tensor X = X0.clone().requires_grad_(true);
    at::Tensor sub = p.sub.clone().requires_grad_(true);
    for (at::Tensor* t : {&hc->fn, &hc->base, &hc->scale}) {
      t->requires_grad_(true);
      t->mutable_grad() = at::Tensor();
    }
    outs[path] = hc->forward(X, [&](const at::Tensor& x) { return at::tanh(at::matmul(x, sub)); });
    EXPECT_LT((outs[path] - want).abs().max().item<double>(), 1e-12);
    (outs[path] * R).sum().backward();
    const at::Tensor grads[] = {X.grad(), hc->fn.grad(), hc->base.grad(), hc->scale.grad(), sub.grad()};
    for (const auto& [which, indices] : probes)
      for (int64_t i : indices)
        EXPECT_NEAR(grads[which].reshape(-1)[i].item<double>(), numeric(which, i), 1e-7)
            << "tensor " << which << " [" << i << "]";
  }
  EXPECT_NE(loss_want, 0.0);

  // float32 close to float64; bf16 keeps its dtype.
  HyperConnection hc32(n, H, iters, eps, norm_eps, TensorPlacement{at::kFloat, c10::Device(c10::kCPU)});
  {
    at::NoGradGuard no_grad;
    hc32->fn.copy_(p.fn);
    hc32->base.copy_(p.base);
    hc32->scale.copy_(p.scale);
  }
  const at::Tensor sub32 = p.sub.to(at::kFloat);
  const at::Tensor out32 =
      hc32->forward(X0.to(at::kFloat), [&](const at::Tensor& x) { return at::tanh(at::matmul(x, sub32.to(x.scalar_type()))); });
  EXPECT_EQ(out32.scalar_type(), at::kFloat);
  EXPECT_LT((out32.to(at::kDouble) - want).abs().max().item<double>(), 1e-5);
  const at::Tensor out16 = hc32->forward(X0.to(at::kBFloat16), [&](const at::Tensor& x) {
    return at::tanh(at::matmul(x, sub32.to(x.scalar_type())));
  });
  EXPECT_EQ(out16.scalar_type(), at::kBFloat16);
  EXPECT_LT((out16.to(at::kDouble) - want).abs().max().item<double>(), 0.1);
}

// What a forward leaves allocated for backward, per token, against kept_bytes: DeepSeek-V4's
// four streams and 20 Sinkhorn rounds, the mixing weights frozen (LoRA) and trained
// (--full), float32 and float64, on the kernels and on ATen's operators. The sublayer
// (a sine) keeps its input, as the sublayer's norm does, and returns a new output.
TEST(HyperConnection, KeepsWhatItSays) {
  const int64_t B = 2, S = 16, n = 4, H = 64, iters = 20;
  for (const auto dtype : {at::kFloat, at::kDouble})
    for (const bool trained : {false, true})
      for (const bool aten : {false, true}) {
        SCOPED_TRACE(std::string(dtype == at::kFloat ? "float32" : "float64") + (trained ? ", trained" : ", frozen") +
                     (aten ? ", ATen" : ", kernels"));
        std::optional<AtenOperatorsOnly> aten_only;
        if (aten) aten_only.emplace();
        HyperConnection hc(n, H, iters, 1e-6, 1e-6, TensorPlacement{dtype, c10::Device(c10::kCPU)});
        {
          at::NoGradGuard no_grad;
          hc->fn.normal_(0, 0.02);
          hc->scale.fill_(1);
        }
        for (at::Tensor* t : {&hc->fn, &hc->base, &hc->scale}) t->requires_grad_(trained);
        const at::Tensor X = at::randn({B, S, n, H}, at::TensorOptions().dtype(dtype)).requires_grad_(true);
        int64_t live = 0;
        at::Tensor out;
        {
          auto observing = compat::observe_allocations([&](void*, int64_t bytes) { live += bytes; });
          out = hc->forward(X, [](const at::Tensor& x) { return at::sin(x); });
        }
        const double said = hc->kept_bytes(int64_t(c10::elementSize(dtype))) * double(B * S);
        std::cout << "[ kept     ] " << (dtype == at::kFloat ? "float32" : "float64") << (trained ? " trained" : " frozen")
                  << (aten ? " ATen" : " kernels") << ": said " << said << ", measured " << live << "\n";
        if (compat::torch_version().rfind("1.", 0) == 0) EXPECT_NEAR(said / double(live), 1.0, 0.01);
        else EXPECT_TRUE(said / double(live) >= 0.8 && said / double(live) <= 1.3) << said / double(live);
      }
}

}  // namespace
}  // namespace glint
