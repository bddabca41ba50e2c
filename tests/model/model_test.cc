// Numerics of the decoder: attention and the MoE block against naive loops and central
// finite differences (float64), packing, LoRA on experts.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include "lora/lora.h"
#include "model/causal_lm.h"
#include "model/qwen3/attention.h"
#include "model/layers.h"
#include "model/moe.h"
#include "reference.h"
#include "model_util.h"

namespace glint {
namespace {

using glint::testing::kF64;

using namespace glint::testing;

ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 19;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.moe_intermediate_size = 6;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.rope_theta = 100.0;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.mlp_only_layers = {1};
  c.initializer_range = 0.5;
  c.validate("test");
  return c;
}

void randomize(torch::nn::Module& m, double scale = 0.5) {
  at::NoGradGuard ng;
  for (auto& p : m.parameters()) p.copy_(at::randn(p.sizes(), p.options()) * scale + (p.dim() == 1 ? 1.0 : 0.0));
}

AttentionRefWeights ref_weights(AttentionImpl& a, const ModelConfig& c) {
  AttentionRefWeights w;
  w.Wq = a.q_proj->weight, w.Wk = a.k_proj->weight, w.Wv = a.v_proj->weight, w.Wo = a.o_proj->weight;
  w.bq = a.q_proj->bias, w.bk = a.k_proj->bias, w.bv = a.v_proj->bias, w.bo = a.o_proj->bias;
  w.q_norm = a.q_norm->weight, w.k_norm = a.k_norm->weight;
  w.Nh = c.num_attention_heads, w.Nkv = c.num_key_value_heads, w.D = c.head_dim;
  w.eps = c.rms_norm_eps, w.theta = c.rope_theta;
  return w;
}

TEST(Attention, ForwardMatchesNaiveLoopWithSegmentsAndPadding) {
  at::manual_seed(1);
  ModelConfig c = small_config();
  Attention attn(c, kF64);
  randomize(*attn);
  const int64_t S = 7, H = c.hidden_size, D = c.head_dim;
  at::Tensor x = at::randn({1, S, H}, at::kDouble);
  // Two packed samples (lengths 3 and 2) then two padding tokens.
  std::vector<int64_t> pos = {0, 1, 2, 0, 1, 0, 0}, seg = {0, 0, 0, 1, 1, -1, -1};
  auto row = [](const std::vector<int64_t>& v) { return at::tensor(v, at::kLong).view({1, -1}); };
  LayerContext ctx;
  ctx.rope = {rotary_tables(row(pos), D, c.rope_theta, at::kDouble)};
  ctx.layout = sequence_layout(row(seg), c10::Device(c10::kCPU));
  at::Tensor got = attn->forward(x, ctx);
  at::Tensor want = attention_ref(ref_weights(*attn, c), x[0], pos, seg);
  for (int64_t i = 0; i < S; ++i)
    EXPECT_TRUE(at::allclose(got[0][i], want[i], 1e-10, 1e-12)) << "token " << i << got[0][i] << want[i];
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  at::manual_seed(2);
  ModelConfig c = small_config();
  Attention attn(c, kF64);
  randomize(*attn);
  at::Tensor x = at::randn({2, 5, c.hidden_size}, at::kDouble).set_requires_grad(true);
  at::Tensor pos = at::arange(5, at::kLong).repeat({2, 1});
  at::Tensor seg = at::tensor({0, 0, 1, 1, 1, 0, 0, 0, 0, -1}, at::kLong).view({2, 5});
  LayerContext ctx;
  ctx.rope = {rotary_tables(pos, c.head_dim, c.rope_theta, at::kDouble)};
  ctx.layout = sequence_layout(seg, c10::Device(c10::kCPU));
  at::Tensor probe = at::randn({2, 5, c.hidden_size}, at::kDouble);
  auto f = [&] { return (attn->forward(x, ctx) * probe).sum(); };
  EXPECT_LT(fd_check(f, x), 1e-6);
  for (at::Tensor p : {attn->q_proj->weight, attn->k_proj->weight, attn->v_proj->weight,
                       attn->o_proj->weight, attn->q_norm->weight, attn->k_norm->weight})
    EXPECT_LT(fd_check(f, p), 1e-6);
}

class MoeTest : public ::testing::TestWithParam<bool> {};

TEST_P(MoeTest, ForwardMatchesNaivePerTokenLoop) {
  for (int64_t E : {4, 8})
    for (auto dtype : {at::kDouble, at::kFloat}) {
      SCOPED_TRACE(::testing::Message() << "E=" << E << " dtype=" << dtype);
      at::manual_seed(3);
      ModelConfig c = small_config();
      c.norm_topk_prob = GetParam();
      c.num_experts = E;
      MoeBlock moe(c, TensorPlacement{dtype, c10::Device(c10::kCPU)});
      randomize(*moe);
      const int64_t T = 11;
      at::Tensor x = at::randn({T, c.hidden_size}, dtype);
      ASSERT_GT(topk_margin_ref(moe->gate->weight, x, 2), 1e-4);  // same choice in f32 and f64
      at::Tensor got = moe->forward(x).to(at::kDouble);
      at::Tensor Wr = moe->gate->weight.detach().to(at::kDouble), xd = x.to(at::kDouble);
      at::Tensor Wgu = moe->experts->gate_up_proj.detach().to(at::kDouble);
      at::Tensor Wd = moe->experts->down_proj.detach().to(at::kDouble);
      double rtol = dtype == at::kDouble ? 1e-10 : 1e-5, atol = dtype == at::kDouble ? 1e-12 : 1e-5;
      for (int64_t t = 0; t < T; ++t) {
        at::Tensor want = at::zeros({c.hidden_size}, at::kDouble);
        for (auto [e, w] : route_ref(Wr, xd[t], 2, c.norm_topk_prob))
          want += w * expert_ref(Wgu[e], Wd[e], xd[t]);
        EXPECT_TRUE(at::allclose(got[t], want, rtol, atol)) << "token " << t << got[t] << want;
      }
    }
}

TEST_P(MoeTest, GradientsMatchFiniteDifferences) {
  at::manual_seed(4);
  ModelConfig c = small_config();
  c.norm_topk_prob = GetParam();
  MoeBlock moe(c, kF64);
  randomize(*moe);
  at::Tensor x = at::randn({6, c.hidden_size}, at::kDouble).set_requires_grad(true);
  at::Tensor probe = at::randn({6, c.hidden_size}, at::kDouble);
  // FD steps of 1e-6 cannot flip a top-k choice separated by more than this.
  ASSERT_GT(topk_margin_ref(moe->gate->weight, x, 2), 1e-3);
  auto f = [&] { return (moe->forward(x) * probe).sum(); };
  EXPECT_LT(fd_check(f, x), 1e-6);
  EXPECT_LT(fd_check(f, moe->gate->weight), 1e-6);
  EXPECT_LT(fd_check(f, moe->experts->gate_up_proj, 24), 1e-6);
  EXPECT_LT(fd_check(f, moe->experts->down_proj, 24), 1e-6);
}

// The prefix starts with "Moe" so that --gtest_filter=Moe* selects these.
INSTANTIATE_TEST_SUITE_P(MoeNormTopk, MoeTest, ::testing::Bool());

TEST(Moe, ExpertsWithoutTokensAndLoadBalancingLoss) {
  at::manual_seed(5);
  ModelConfig c = small_config();
  MoeBlock moe(c, kF64);
  randomize(*moe);
  {
    at::NoGradGuard ng;  // route every token to experts 2 and 3 only
    moe->gate->weight.zero_();
    moe->gate->weight[2].fill_(10);
    moe->gate->weight[3].fill_(5);
  }
  at::Tensor x = at::rand({5, c.hidden_size}, at::kDouble) + 0.5;
  Routing r = moe->route(x);
  EXPECT_TRUE(at::equal(std::get<0>(at::sort(r.experts, 1)), at::tensor({2, 3}, at::kLong).repeat({5, 1})));
  EXPECT_TRUE(at::allclose(moe->forward(x)[0], [&] {
    at::Tensor w = at::zeros({c.hidden_size}, at::kDouble);
    for (auto [e, wt] : route_ref(moe->gate->weight, x[0], 2, true))
      w += wt * expert_ref(moe->experts->gate_up_proj[e], moe->experts->down_proj[e], x[0]);
    return w;
  }()));
  // transformers' formula, by hand: E * sum_{k,e} frac(k-th choice = e) * mean prob(e),
  // over valid tokens of all layers.
  at::Tensor l1 = at::randn({5, 4}, at::kDouble), l2 = at::randn({5, 4}, at::kDouble);
  at::Tensor valid = at::tensor({1, 1, 0, 1, 1}, at::kLong).to(at::kBool);
  double want = 0;
  std::vector<std::vector<double>> frac(2, std::vector<double>(4, 0));
  std::vector<double> mean_p(4, 0);
  int n = 0;
  for (const at::Tensor& l : {l1, l2})
    for (int64_t t = 0; t < 5; ++t) {
      if (!valid[t].item<bool>()) continue;
      ++n;
      at::Tensor p = at::softmax(l[t], 0);
      auto order = std::get<1>(at::sort(p, 0, true));
      for (int k = 0; k < 2; ++k) frac[k][order[k].item<int64_t>()] += 1;
      for (int e = 0; e < 4; ++e) mean_p[e] += p[e].item<double>();
    }
  for (int k = 0; k < 2; ++k)
    for (int e = 0; e < 4; ++e) want += (frac[k][e] / n) * (mean_p[e] / n);
  want *= 4;
  EXPECT_NEAR(load_balancing_loss({l1, l2}, valid, 4, 2).item<double>(), want, 1e-12);
}

TEST(Lora, ExpertLoraMatchesMergedWeightsAndFiniteDifferences) {
  at::manual_seed(6);
  ModelConfig c = small_config();
  c.num_hidden_layers = 1;
  c.mlp_only_layers.clear();
  CausalLM model(c, kF64);
  randomize(*model);
  LoraOptions o;
  o.r = 3;
  o.alpha = 6;
  o.target_modules.clear();
  o.all_targets = false;
  o.dtype = at::kDouble;
  LoraModel lora = apply_lora(*model, o, 1);
  ASSERT_EQ(lora.sites.size(), 2u);
  for (auto& s : lora.sites) {
    at::NoGradGuard ng;
    s.B().copy_(at::randn(s.B().sizes(), at::kDouble) * 0.3);
  }
  MoeBlock moe = model->layer(0)->moe;
  auto& gu = *lora.sites[0].experts;  // gate_up_proj
  auto& dn = *lora.sites[1].experts;  // down_proj
  ASSERT_EQ(lora.sites[0].parameter, "gate_up_proj");
  const int64_t T = 7;
  at::Tensor x = at::randn({T, c.hidden_size}, at::kDouble);
  ASSERT_GT(topk_margin_ref(moe->gate->weight, x, 2), 1e-3);  // FD-stable routing
  at::Tensor got = moe->forward(x);
  for (int64_t t = 0; t < T; ++t) {
    at::Tensor want = at::zeros({c.hidden_size}, at::kDouble);
    for (auto [e, w] : route_ref(moe->gate->weight, x[t], 2, true)) {
      at::Tensor Wgu = moe->experts->gate_up_proj[e] + 2.0 * at::mm(gu.B[e], gu.A[e]);  // scale 6/3
      at::Tensor Wd = moe->experts->down_proj[e] + 2.0 * at::mm(dn.B[e], dn.A[e]);
      want += w * expert_ref(Wgu.detach(), Wd.detach(), x[t]);
    }
    EXPECT_TRUE(at::allclose(got[t], want, 1e-10, 1e-12)) << "token " << t;
  }
  at::Tensor probe = at::randn({T, c.hidden_size}, at::kDouble);
  auto f = [&] { return (moe->forward(x) * probe).sum(); };
  for (auto& s : lora.sites) {
    EXPECT_LT(fd_check(f, s.A(), 20), 1e-6) << s.parameter;
    EXPECT_LT(fd_check(f, s.B(), 20), 1e-6) << s.parameter;
  }
}

TEST(Lora, ZeroBLeavesLogitsUnchangedAndLinearLoraIsLowRank) {
  at::manual_seed(7);
  ModelConfig c = small_config();
  CausalLM model(c, kF64);
  randomize(*model);
  at::Tensor ids = at::randint(0, c.vocab_size, {2, 6}, at::kLong);
  at::Tensor pos = at::arange(6, at::kLong).repeat({2, 1}), seg = at::zeros({2, 6}, at::kLong);
  at::NoGradGuard ng;
  at::Tensor before = model->logits(model->forward(ids, pos, seg).hidden);
  LoraOptions o;
  o.dtype = at::kDouble;
  LoraModel lora = apply_lora(*model, o, 3);
  EXPECT_TRUE(at::equal(before, model->logits(model->forward(ids, pos, seg).hidden)));
  // Dense layer 1 has gate/up/down LoRA; attention everywhere; experts in layer 0.
  EXPECT_EQ(lora.sites.size(), 4u + 2u + 4u + 3u);
  // A linear adapter equals x (W + s B A)^T.
  Linear q = model->layer(1)->attention<AttentionImpl>()->q_proj;
  auto ad = std::static_pointer_cast<LoraLinear>(q->adapter);
  ad->B.copy_(at::randn(ad->B.sizes(), at::kDouble));
  at::Tensor x = at::randn({3, c.hidden_size}, at::kDouble);
  at::Tensor merged = q->weight + (o.alpha / o.r) * at::mm(ad->B, ad->A);
  EXPECT_TRUE(at::allclose(q->forward(x), at::mm(x, merged.t()), 1e-10, 1e-12));
}

TEST(Model, PackedSequencesGiveTheSamePerTokenLoss) {
  at::manual_seed(8);
  ModelConfig c = small_config();
  CausalLM model(c, kF64);
  randomize(*model);
  std::vector<std::vector<int64_t>> samples = {{1, 5, 7, 2}, {3, 9, 4}, {8, 6, 11, 12, 13}};
  // Packed: one row of 14 tokens (12 real + 2 padding).
  std::vector<int64_t> ids, labels, pos, seg;
  for (size_t s = 0; s < samples.size(); ++s)
    for (size_t i = 0; i < samples[s].size(); ++i) {
      ids.push_back(samples[s][i]);
      labels.push_back(i == 0 ? -100 : samples[s][i]);
      pos.push_back(i);
      seg.push_back(s);
    }
  for (int p = 0; p < 2; ++p) {
    ids.push_back(0);
    labels.push_back(-100);
    pos.push_back(0);
    seg.push_back(-1);
  }
  auto row = [](const std::vector<int64_t>& v) { return at::tensor(v, at::kLong).view({1, -1}); };
  at::NoGradGuard ng;
  at::Tensor packed = token_cross_entropy(*model, model->forward(row(ids), row(pos), row(seg)).hidden,
                                          row(labels))[0];  // [13]
  size_t offset = 0;
  for (const auto& s : samples) {
    std::vector<int64_t> p(s.size()), z(s.size(), 0);
    std::iota(p.begin(), p.end(), 0);
    at::Tensor alone = token_cross_entropy(*model, model->forward(row(s), row(p), row(z)).hidden, row(s))[0];
    // Position i of the packed row predicts label i+1: the sample's own predictions sit
    // at offsets [offset, offset + len - 1).
    at::Tensor mine = packed.narrow(0, offset, s.size() - 1);
    EXPECT_TRUE(at::allclose(mine, alone, 1e-10, 1e-12)) << mine << alone;
    if (offset + s.size() - 1 < 13) EXPECT_EQ(packed[offset + s.size() - 1].item<double>(), 0.0);
    offset += s.size();
  }
}

TEST(Model, TiedEmbeddingsAndDenseQwen3) {
  at::manual_seed(9);
  ModelConfig c = small_config();
  c.model_type = "qwen3";
  c.num_experts = 0;
  c.num_experts_per_tok = 0;
  c.mlp_only_layers.clear();
  c.tie_word_embeddings = true;
  CausalLM model(c, kF64);
  randomize(*model);
  EXPECT_FALSE(model->lm_head);
  for (const auto& p : model->named_parameters()) EXPECT_EQ(p.key().find("experts"), std::string::npos);
  at::Tensor h = at::randn({3, c.hidden_size}, at::kDouble);
  EXPECT_TRUE(at::allclose(model->logits(h), at::mm(h, model->model->embed_tokens_weight.t())));
  at::Tensor ids = at::randint(0, c.vocab_size, {1, 4}, at::kLong);
  auto out = model->forward(ids, at::arange(4, at::kLong).view({1, 4}), at::zeros({1, 4}, at::kLong));
  EXPECT_EQ(out.hidden.sizes(), (std::vector<int64_t>{1, 4, c.hidden_size}));
  EXPECT_TRUE(out.router_logits.empty());
}

}  // namespace
}  // namespace glint
