// Block attention against the plain computation: the whole [b, N, S, S] score matrix,
// masked, with the sink as one more column of the softmax, grouped heads by repeating
// the kv heads; values and the gradients of q, k, v and the sinks (autograd through the
// plain form) in float64, for windows, sinks, odd block sizes and one-token sequences.
#include "model/block_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <limits>
#include <vector>

namespace glint {
namespace {

at::Tensor plain_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                           const at::Tensor& sinks, int64_t window) {
  const int64_t b = q.size(0), N = q.size(1), S = q.size(2), rep = N / k.size(1);
  at::Tensor kr = k.repeat_interleave(rep, 1), vr = v.repeat_interleave(rep, 1);
  at::Tensor scores = at::matmul(q, kr.transpose(-1, -2)) * scale;  // [b, N, S, S]
  std::vector<uint8_t> hide(S * S);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) hide[i * S + j] = j > i || (window > 0 && i - j >= window);
  at::Tensor mask = at::tensor(std::vector<int64_t>(hide.begin(), hide.end())).view({S, S}).to(at::kBool);
  scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  if (sinks.defined())
    scores = at::cat({scores, sinks.view({1, N, 1, 1}).expand({b, N, S, 1})}, -1);
  at::Tensor p = at::softmax(scores, -1);
  if (sinks.defined()) p = p.narrow(-1, 0, S);
  return at::matmul(p, vr);
}

struct Case {
  int64_t b, N, Nkv, S, D, Dv, window, block;
  bool sinks;
};

TEST(BlockAttention, ValuesAndGradientsMatchThePlainFormInFloat64) {
  const std::vector<Case> cases = {
      {2, 4, 2, 13, 8, 8, 0, 3, false},  {1, 4, 4, 13, 8, 6, 0, 1, false}, {2, 6, 2, 17, 4, 4, 5, 4, true},
      {1, 2, 1, 9, 4, 4, 3, 7, false},   {2, 3, 1, 1, 4, 4, 0, 0, true},   {1, 4, 2, 33, 8, 8, 8, 0, true},
      {1, 2, 2, 12, 4, 4, 20, 5, true},  {3, 2, 1, 16, 4, 4, 0, 16, true},
  };
  at::manual_seed(7);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "b " << c.b << " N " << c.N << "/" << c.Nkv << " S " << c.S << " window "
                                      << c.window << " block " << c.block << " sinks " << c.sinks);
    auto opts = at::TensorOptions().dtype(at::kDouble);
    at::Tensor q = at::randn({c.b, c.N, c.S, c.D}, opts).requires_grad_();
    at::Tensor k = at::randn({c.b, c.Nkv, c.S, c.D}, opts).requires_grad_();
    at::Tensor v = at::randn({c.b, c.Nkv, c.S, c.Dv}, opts).requires_grad_();
    at::Tensor sinks = c.sinks ? at::randn({c.N}, opts).requires_grad_() : at::Tensor();
    at::Tensor up = at::randn({c.b, c.N, c.S, c.Dv}, opts);  // the output's gradient
    const double scale = 1.0 / std::sqrt(double(c.D));
    at::Tensor got = block_attention(q, k, v, scale, sinks, c.window, c.block);
    at::Tensor want = plain_attention(q, k, v, scale, sinks, c.window);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_LT((got - want).abs().max().item<double>(), 1e-12);
    std::vector<at::Tensor> inputs = {q, k, v};
    if (c.sinks) inputs.push_back(sinks);
    auto g_got = torch::autograd::grad({got}, inputs, {up});
    auto g_want = torch::autograd::grad({want}, inputs, {up});
    for (size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_TRUE(g_got[i].defined()) << i;
      EXPECT_LT((g_got[i] - g_want[i]).abs().max().item<double>(), 1e-11) << "gradient " << i;
    }
  }
}

// Transposed inputs, as the attention modules pass them ([b, S, N, D] viewed as
// [b, N, S, D]), and float32 within its rounding of the float64 result.
TEST(BlockAttention, StridedFloat32InputsWithinRounding) {
  at::manual_seed(3);
  const int64_t b = 2, N = 4, Nkv = 2, S = 40, D = 16;
  at::Tensor q = at::randn({b, S, N, D}).transpose(1, 2).requires_grad_();
  at::Tensor k = at::randn({b, S, Nkv, D}).transpose(1, 2);
  at::Tensor v = at::randn({b, S, Nkv, D}).transpose(1, 2);
  at::Tensor got = block_attention(q, k, v, 0.25, at::Tensor(), 0, 8);
  at::Tensor want = plain_attention(q.to(at::kDouble), k.to(at::kDouble), v.to(at::kDouble), 0.25, at::Tensor(), 0);
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_LT((got.to(at::kDouble) - want).abs().max().item<double>(), 1e-5);
  at::Tensor g = torch::autograd::grad({got.sum()}, {q})[0];
  at::Tensor qd = q.detach().to(at::kDouble).requires_grad_();
  at::Tensor gd = torch::autograd::grad({plain_attention(qd, k.to(at::kDouble), v.to(at::kDouble), 0.25,
                                                         at::Tensor(), 0).sum()},
                                        {qd})[0];
  EXPECT_LT((g.to(at::kDouble) - gd).abs().max().item<double>(), 1e-4);
}

}  // namespace
}  // namespace glint
