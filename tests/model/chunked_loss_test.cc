// The chunked cross-entropy against the plain one (log_softmax over whole logits) in
// float64: values, and gradients with respect to the hidden states and the output head.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdio>

#include "live_bytes.h"
#include "model/causal_lm.h"
#include "model/chunked_loss.h"

namespace glint {
namespace {

double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).norm().item<double>() / std::max(1e-300, b.norm().item<double>());
}

TEST(ChunkedLoss, EqualsThePlainLossAndItsGradientsForEveryChunkSize) {
  at::manual_seed(3);
  const int64_t N = 13, H = 5, V = 11;
  at::Tensor h0 = at::randn({N, H}, at::kDouble), w0 = at::randn({V, H}, at::kDouble);
  at::Tensor target = at::randint(0, V, {N}, at::kLong);
  at::Tensor g = at::rand({N}, at::kDouble);  // a weighting of the tokens, as a loss normaliser does
  // Reference: whole logits.
  at::Tensor h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  at::Tensor ref = -at::log_softmax(at::matmul(h, w.t()), 1).gather(1, target.unsqueeze(1)).squeeze(1);
  auto ref_grads = torch::autograd::grad({(ref * g).sum()}, {h, w});
  // Head trainable: the online forward, then backward over the same tiles (tokens x
  // head rows), uneven at both edges, down to one element per tile.
  for (auto [elements, tile_tokens] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {5, 2}, {12, 4}, {40, 13}, {1000, 5}, {1000, 100}}) {
    const std::string chunk = std::to_string(elements) + " x " + std::to_string(tile_tokens);
    at::Tensor hc = h0.clone().requires_grad_(true), wc = w0.clone().requires_grad_(true);
    at::Tensor nll = chunked_cross_entropy(hc, wc, target, elements, tile_tokens);
    ASSERT_EQ(nll.scalar_type(), at::kDouble);
    EXPECT_LT(rel(nll, ref.detach()), 1e-13) << chunk;
    auto grads = torch::autograd::grad({(nll * g).sum()}, {hc, wc});
    EXPECT_LT(rel(grads[0], ref_grads[0]), 1e-13) << chunk;
    EXPECT_LT(rel(grads[1], ref_grads[1]), 1e-13) << chunk;
  }
  // A frozen head: the one-pass online form, over tiles of tokens x head rows, uneven
  // at both edges (13 tokens, 11 rows), down to one row per tile.
  for (auto [elements, tile_tokens] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {5, 2}, {12, 4}, {40, 13}, {1000, 5}, {1000, 100}}) {
    at::Tensor hc = h0.clone().requires_grad_(true);
    at::Tensor nll = chunked_cross_entropy(hc, w0, target, elements, tile_tokens);
    EXPECT_LT(rel(nll, ref.detach()), 1e-13) << elements << " x " << tile_tokens;
    auto gh = torch::autograd::grad({(nll * g).sum()}, {hc});
    EXPECT_LT(rel(gh[0], ref_grads[0]), 1e-13) << elements << " x " << tile_tokens;
  }
}

// bf16 hidden states and head (a bf16 run): the loss in float32, within bf16's rounding
// of the float64 loss of the same (bf16-representable) inputs, for both head forms.
TEST(ChunkedLoss, Bf16InputsGiveAFloat32LossWithinBf16Rounding) {
  at::manual_seed(4);
  const int64_t N = 37, H = 16, V = 29;
  at::Tensor h16 = at::randn({N, H}).to(at::kBFloat16), w16 = (at::randn({V, H}) * 0.3).to(at::kBFloat16);
  at::Tensor target = at::randint(0, V, {N}, at::kLong);
  at::Tensor h = h16.to(at::kDouble).requires_grad_(true), w = w16.to(at::kDouble).requires_grad_(true);
  at::Tensor ref = -at::log_softmax(at::matmul(h, w.t()), 1).gather(1, target.unsqueeze(1)).squeeze(1);
  auto ref_grads = torch::autograd::grad({ref.sum()}, {h, w});
  for (bool head_trains : {false, true}) {
    SCOPED_TRACE(head_trains ? "trainable head" : "frozen head");
    at::Tensor hc = h16.clone().requires_grad_(true), wc = w16.clone().requires_grad_(head_trains);
    at::Tensor nll = chunked_cross_entropy(hc, wc, target, /*chunk_elements=*/64, /*tile_tokens=*/8);
    ASSERT_EQ(nll.scalar_type(), at::kFloat);
    EXPECT_LT(rel(nll.to(at::kDouble), ref.detach()), 1e-2);
    std::vector<at::Tensor> inputs{hc};
    if (head_trains) inputs.push_back(wc);
    auto grads = torch::autograd::grad({nll.sum()}, inputs);
    EXPECT_EQ(grads[0].scalar_type(), at::kBFloat16);
    EXPECT_LT(rel(grads[0].to(at::kDouble), ref_grads[0]), 2e-2);
    if (head_trains) EXPECT_LT(rel(grads[1].to(at::kDouble), ref_grads[1]), 2e-2);
  }
}

// With bf16 operands a tile of logits exists in bf16 and in float32 at once: the loss
// holds no more bytes than the float32 loss of the same tokens (the tile has fewer rows),
// up to a few [tokens, H] buffers; with a whole tile of each it held 1.45x.
TEST(ChunkedLoss, Bf16TilesTakeNoMoreBytesThanFloat32s) {
  at::manual_seed(5);
  const int64_t N = 256, H = 64, V = 4096;  // the whole [N, V] tile fits the default chunk
  at::Tensor target = at::randint(0, V, {N}, at::kLong);
  at::Tensor h = at::randn({N, H}), w = at::randn({V, H}) * 0.1;
  auto peak = [&](at::ScalarType dtype) {
    at::Tensor hd = h.to(dtype).requires_grad_(true), wd = w.to(dtype);  // a frozen head
    testing::LiveBytes live;
    chunked_cross_entropy(hd, wd, target);
    return live.peak();
  };
  const int64_t f32 = peak(at::kFloat), bf16 = peak(at::kBFloat16);
  std::printf("[ loss peak ] float32 %lld bytes, bf16 %lld bytes\n", (long long)f32, (long long)bf16);
  EXPECT_LE(double(bf16), 1.1 * double(f32));
  EXPECT_GE(f32, N * V * 4);  // the float32 tile itself
}

// token_cross_entropy with ignored labels (prompt tokens, padding) equals the plain
// shifted loss: zeros where nothing is trained, and the same gradients.
TEST(ChunkedLoss, TokenCrossEntropyMatchesThePlainShiftedLoss) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 23;
  c.hidden_size = 8;
  c.intermediate_size = 16;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  c.num_experts = 0;
  for (bool tied : {false, true}) {
    c.tie_word_embeddings = tied;
    CausalLM m(c, TensorPlacement{at::kDouble});
    init_weights(*m, 5);
    at::manual_seed(7);
    const int64_t B = 3, S = 7;
    at::Tensor hidden0 = at::randn({B, S, c.hidden_size}, at::kDouble);
    at::Tensor labels = at::randint(0, c.vocab_size, {B, S}, at::kLong);
    labels.index_put_({0, at::indexing::Slice(0, 3)}, -100);
    labels.index_put_({2, at::indexing::Slice(4, S)}, -100);
    labels[1][6] = -100;
    at::Tensor head = m->lm_head_weight();
    head.requires_grad_(true);
    at::Tensor hidden = hidden0.clone().requires_grad_(true);
    at::Tensor got = token_cross_entropy(*m, hidden, labels);  // [B,S-1]
    at::Tensor wt = at::rand({B, S - 1}, at::kDouble);
    auto g = torch::autograd::grad({(got * wt).sum()}, {hidden, head});
    // Plain: every position's logits.
    at::Tensor hp = hidden0.clone().requires_grad_(true);
    at::Tensor logp = at::log_softmax(at::matmul(hp.narrow(1, 0, S - 1), head.t()), -1);
    at::Tensor tgt = labels.narrow(1, 1, S - 1);
    at::Tensor want = -logp.gather(2, tgt.clamp_min(0).unsqueeze(2)).squeeze(2) * tgt.ne(-100);
    auto gw = torch::autograd::grad({(want * wt).sum()}, {hp, head});
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_LT(rel(got, want.detach()), 1e-13) << "tied " << tied;
    EXPECT_TRUE(got.masked_select(tgt.eq(-100)).eq(0).all().item<bool>());
    EXPECT_LT(rel(g[0], gw[0]), 1e-13) << "tied " << tied;
    EXPECT_LT(rel(g[1], gw[1]), 1e-13) << "tied " << tied;
    head.requires_grad_(false);
  }
}

}  // namespace
}  // namespace glint
