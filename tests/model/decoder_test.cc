// The whole decoder against a naive loop written from the Hugging Face definitions
// (embedding, pre-norm attention and MLP with residuals, final norm, lm_head), its
// gradients against finite differences, the loss parts, masks and rotary tables.
//
// Legend: B rows, S sequence length, H hidden, V vocab, E experts, K top-k.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "model/layers.h"
#include "model/qwen3/attention.h"
#include "reference.h"
#include "model_util.h"

namespace glint {
namespace {

using glint::testing::kF64;
using glint::testing::kF32;

using namespace glint::testing;

// Layer 0 is MoE (E=4, K=2), layer 1 dense.
ModelConfig decoder_config() {
  ModelConfig c;
  c.vocab_size = 17;
  c.hidden_size = 8;
  c.intermediate_size = 10;
  c.moe_intermediate_size = 6;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.rope_theta = 50.0;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.mlp_only_layers = {1};
  c.validate("test");
  return c;
}
const std::vector<bool> kMoeLayers = {true, false};

void randomize(torch::nn::Module& m, double scale = 0.5) {
  at::NoGradGuard ng;
  for (auto& p : m.parameters())
    p.copy_(at::randn(p.sizes(), p.options().dtype(at::kDouble)).to(p.scalar_type()) * scale +
            (p.dim() == 1 ? 1.0 : 0.0));
}

at::Tensor row(const std::vector<int64_t>& v) { return at::tensor(v, at::kLong).view({1, -1}); }

struct RefOut {
  at::Tensor logits;                       // [S, V]
  std::vector<at::Tensor> router_logits;   // per MoE layer, [S, E]
  double margin = 1.0;                     // smallest top-k probability gap seen
};

// One row through the decoder by naive loops, reading parameters by their HF names.
RefOut decoder_ref(CausalLMImpl& m, const std::vector<int64_t>& ids,
                   const std::vector<int64_t>& pos, const std::vector<int64_t>& seg) {
  const ModelConfig& c = m.config;
  auto params = m.named_parameters();
  auto W = [&](const std::string& name) { return params[name].detach().to(at::kDouble); };
  auto Wopt = [&](const std::string& name) { return params.contains(name) ? W(name) : at::Tensor(); };
  const int64_t S = ids.size(), H = c.hidden_size, K = c.num_experts_per_tok;
  RefOut out;
  at::Tensor x = at::empty({S, H}, at::kDouble);
  for (int64_t i = 0; i < S; ++i) x[i] = W("model.embed_tokens.weight")[ids[i]];
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    at::Tensor normed = at::empty_like(x);
    for (int64_t i = 0; i < S; ++i) normed[i] = rms_norm_ref(x[i], W(p + "input_layernorm.weight"), c.rms_norm_eps);
    AttentionRefWeights w;
    w.Wq = W(p + "self_attn.q_proj.weight"), w.Wk = W(p + "self_attn.k_proj.weight");
    w.Wv = W(p + "self_attn.v_proj.weight"), w.Wo = W(p + "self_attn.o_proj.weight");
    w.bq = Wopt(p + "self_attn.q_proj.bias"), w.bk = Wopt(p + "self_attn.k_proj.bias");
    w.bv = Wopt(p + "self_attn.v_proj.bias"), w.bo = Wopt(p + "self_attn.o_proj.bias");
    w.q_norm = W(p + "self_attn.q_norm.weight"), w.k_norm = W(p + "self_attn.k_norm.weight");
    w.Nh = c.num_attention_heads, w.Nkv = c.num_key_value_heads, w.D = c.head_dim;
    w.eps = c.rms_norm_eps, w.theta = c.rope_theta;
    x = x + attention_ref(w, normed, pos, seg);
    at::Tensor router_logits = at::empty({S, c.num_experts}, at::kDouble);
    for (int64_t i = 0; i < S; ++i) {
      at::Tensor n = rms_norm_ref(x[i], W(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
      at::Tensor y = at::zeros({H}, at::kDouble);
      if (kMoeLayers[l]) {
        at::Tensor Wr = W(p + "mlp.gate.weight");
        router_logits[i] = at::mv(Wr, n);
        out.margin = std::min(out.margin, topk_margin_ref(Wr, n.view({1, H}), K));
        for (auto [e, wt] : route_ref(Wr, n, K, c.norm_topk_prob))
          y += wt * expert_ref(W(p + "mlp.experts.gate_up_proj")[e], W(p + "mlp.experts.down_proj")[e], n);
      } else {
        y = dense_mlp_ref(W(p + "mlp.gate_proj.weight"), W(p + "mlp.up_proj.weight"),
                          W(p + "mlp.down_proj.weight"), n);
      }
      x[i] += y;
    }
    if (kMoeLayers[l]) out.router_logits.push_back(router_logits);
  }
  at::Tensor head = c.tie_word_embeddings ? W("model.embed_tokens.weight") : W("lm_head.weight");
  out.logits = at::empty({S, c.vocab_size}, at::kDouble);
  for (int64_t i = 0; i < S; ++i) out.logits[i] = at::mv(head, rms_norm_ref(x[i], W("model.norm.weight"), c.rms_norm_eps));
  return out;
}

// Two packed samples and a padding tail.
const std::vector<int64_t> kIds = {3, 7, 1, 9, 4, 2, 0}, kPos = {0, 1, 2, 3, 0, 1, 0},
                           kSeg = {0, 0, 0, 0, 1, 1, -1};

TEST(Model, ForwardMatchesNaiveDecoder) {
  for (bool tied : {false, true})
    for (bool bias : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "tied=" << tied << " attention_bias=" << bias);
      at::manual_seed(21);
      ModelConfig c = decoder_config();
      c.tie_word_embeddings = tied;
      c.attention_bias = bias;
      CausalLM m(c, kF64);
      randomize(*m);
      at::NoGradGuard ng;
      ForwardOutput out = m->forward(row(kIds), row(kPos), row(kSeg));
      RefOut ref = decoder_ref(*m, kIds, kPos, kSeg);
      ASSERT_GT(ref.margin, 1e-6);
      EXPECT_TRUE(at::allclose(m->logits(out.hidden)[0], ref.logits, 1e-9, 1e-10));
      ASSERT_EQ(out.router_logits.size(), 1u);
      EXPECT_TRUE(at::allclose(out.router_logits[0], ref.router_logits[0], 1e-9, 1e-10));
    }
}

TEST(Model, Float32ForwardMatchesNaiveDecoder) {
  at::manual_seed(22);
  CausalLM m(decoder_config(), kF32);
  randomize(*m);
  at::NoGradGuard ng;
  at::Tensor logits = m->logits(m->forward(row(kIds), row(kPos), row(kSeg)).hidden)[0];
  RefOut ref = decoder_ref(*m, kIds, kPos, kSeg);
  ASSERT_GT(ref.margin, 1e-4);  // float32 routes the same way
  EXPECT_TRUE(at::allclose(logits.to(at::kDouble), ref.logits, 1e-4, 1e-4)) << logits << ref.logits;
}

TEST(Model, LossGradientsMatchFiniteDifferences) {
  at::manual_seed(23);
  ModelConfig c = decoder_config();
  c.attention_bias = true;
  CausalLM m(c, kF64);
  randomize(*m);
  std::vector<int64_t> labels = {3, 7, 1, 9, -100, 2, -100};
  ASSERT_GT(decoder_ref(*m, kIds, kPos, kSeg).margin, 1e-3);
  auto f = [&] {
    return token_cross_entropy(*m, m->forward(row(kIds), row(kPos), row(kSeg)).hidden, row(labels)).sum();
  };
  // eps 1e-4: the loss sums several cross-entropies, so a small step drowns small gradient
  // entries in rounding noise (at 1e-5 one ulp of the loss was 1.8e-6 relative on the
  // router's smallest entries); the central difference's own error is O(eps^2) ~ 1e-8, and
  // the routing margin above (1e-3) keeps top-k fixed for either step.
  auto params = m->named_parameters();
  for (const char* name : {"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
                           "model.layers.0.self_attn.k_proj.bias", "model.layers.0.mlp.gate.weight",
                           "model.layers.0.mlp.experts.gate_up_proj", "model.layers.1.mlp.down_proj.weight",
                           "model.layers.1.self_attn.q_norm.weight", "model.norm.weight", "lm_head.weight"})
    EXPECT_LT(fd_check(f, params[name], 10, 1e-4), 1e-6) << name;
}

TEST(Model, TokenCrossEntropyAndLossPartsMatchNaiveFormulas) {
  at::manual_seed(24);
  ModelConfig c = decoder_config();
  c.output_router_logits = true;
  CausalLM m(c, kF64);
  randomize(*m);
  // Row 0: two samples and padding; row 1: one sample.
  std::vector<std::vector<int64_t>> ids = {kIds, {5, 6, 8, 10, 11, 12, 13}},
                                    pos = {kPos, {0, 1, 2, 3, 4, 5, 6}}, seg = {kSeg, {0, 0, 0, 0, 0, 0, 0}},
                                    labels = {{3, 7, 1, 9, -100, 2, -100}, {5, 6, -100, 10, 11, 12, 13}};
  auto batch = [](const std::vector<std::vector<int64_t>>& v) { return at::cat({row(v[0]), row(v[1])}, 0); };
  at::NoGradGuard ng;
  ForwardOutput out = m->forward(batch(ids), batch(pos), batch(seg));
  at::Tensor ce = token_cross_entropy(*m, out.hidden, batch(labels));  // [2, 6]
  ASSERT_EQ(ce.sizes(), (std::vector<int64_t>{2, 6}));
  double ce_sum = 0;
  std::vector<at::Tensor> router_rows;
  for (int b = 0; b < 2; ++b) {
    RefOut ref = decoder_ref(*m, ids[b], pos[b], seg[b]);
    router_rows.push_back(ref.router_logits[0]);
    for (int i = 0; i < 6; ++i) {
      int64_t label = labels[b][i + 1];
      double want = 0;
      if (label != -100) {
        double mx = ref.logits[i].max().item<double>(), z = 0;
        for (int v = 0; v < c.vocab_size; ++v) z += std::exp(ref.logits[i][v].item<double>() - mx);
        want = mx + std::log(z) - ref.logits[i][label].item<double>();
      }
      ce_sum += want;
      EXPECT_NEAR(ce[b][i].item<double>(), want, 1e-9) << "row " << b << " position " << i;
    }
  }
  LossParts parts = causal_lm_loss(*m, batch(ids), batch(labels), batch(pos), batch(seg));
  EXPECT_NEAR(parts.ce_sum.item<double>(), ce_sum, 1e-9);
  // transformers' load-balancing loss over the non-padding tokens, by hand.
  at::Tensor logits = at::cat(router_rows, 0);  // [B*S, E]
  at::Tensor valid = batch(seg).reshape({-1}).ge(0);
  const int64_t E = c.num_experts, K = c.num_experts_per_tok;
  std::vector<double> frac(K * E, 0), mean_p(E, 0);
  int n = 0;
  for (int64_t t = 0; t < logits.size(0); ++t) {
    if (!valid[t].item<bool>()) continue;
    ++n;
    std::vector<double> p(E);
    double z = 0;
    for (int64_t e = 0; e < E; ++e) z += p[e] = std::exp(logits[t][e].item<double>());
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    for (int64_t k = 0; k < K; ++k) frac[k * E + order[k]] += 1;
    for (int64_t e = 0; e < E; ++e) mean_p[e] += p[e] / z;
  }
  double aux = 0;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t e = 0; e < E; ++e) aux += (frac[k * E + e] / n) * (mean_p[e] / n);
  ASSERT_TRUE(parts.aux_loss.defined());
  EXPECT_NEAR(parts.aux_loss.item<double>(), aux * E, 1e-9);
  c.output_router_logits = false;
  CausalLM plain(c, kF64);
  EXPECT_FALSE(causal_lm_loss(*plain, batch(ids), batch(labels), batch(pos), batch(seg)).aux_loss.defined());
}

TEST(Model, PackedRowEqualsSeparateRowsInFloat32) {
  at::manual_seed(25);
  ModelConfig c = decoder_config();
  CausalLM m(c, kF32);
  randomize(*m, 0.3);
  std::vector<int64_t> a = {2, 4, 6, 8, 10}, b = {1, 3, 5};
  // Packed: a, then b (its first label -100: nothing predicts across the boundary), padding.
  std::vector<int64_t> ids = {2, 4, 6, 8, 10, 1, 3, 5, 0, 0}, pos = {0, 1, 2, 3, 4, 0, 1, 2, 0, 0},
                       seg = {0, 0, 0, 0, 0, 1, 1, 1, -1, -1},
                       labels = {2, 4, 6, 8, 10, -100, 3, 5, -100, -100};
  at::NoGradGuard ng;
  at::Tensor packed = token_cross_entropy(*m, m->forward(row(ids), row(pos), row(seg)).hidden, row(labels))[0];
  auto alone = [&](const std::vector<int64_t>& s) {
    std::vector<int64_t> p(s.size()), z(s.size(), 0);
    std::iota(p.begin(), p.end(), 0);
    return token_cross_entropy(*m, m->forward(row(s), row(p), row(z)).hidden, row(s))[0];
  };
  EXPECT_TRUE(at::allclose(packed.narrow(0, 0, 4), alone(a), 1e-5, 1e-5));
  EXPECT_EQ(packed[4].item<float>(), 0.0f);  // last token of a predicts b's first: ignored
  EXPECT_TRUE(at::allclose(packed.narrow(0, 5, 2), alone(b), 1e-5, 1e-5));
  EXPECT_EQ(packed[7].item<float>(), 0.0f);
  EXPECT_EQ(packed[8].item<float>(), 0.0f);
  double sum = causal_lm_loss(*m, row(ids), row(labels), row(pos), row(seg)).ce_sum.item<double>();
  EXPECT_NEAR(sum, alone(a).sum().item<double>() + alone(b).sum().item<double>(), 1e-4);
}

TEST(Attention, MultiQueryFloat32WithBiasMatchesReferenceAndIgnoresPadding) {
  at::manual_seed(26);
  ModelConfig c = decoder_config();
  c.num_attention_heads = 4;
  c.num_key_value_heads = 1;  // every query head reads kv head 0
  c.attention_bias = true;
  Attention attn(c, kF32);
  randomize(*attn);
  std::vector<int64_t> pos = {0, 1, 0, 1, 2, 0}, seg = {0, 0, 1, 1, 1, -1};
  at::Tensor x = at::randn({1, 6, c.hidden_size});
  LayerContext ctx;
  ctx.rope = {rotary_tables(row(pos), c.head_dim, c.rope_theta)};
  ctx.layout = sequence_layout(row(seg), c10::Device(c10::kCPU));
  at::NoGradGuard ng;
  at::Tensor got = attn->forward(x, ctx);
  AttentionRefWeights w;
  w.Wq = attn->q_proj->weight, w.Wk = attn->k_proj->weight, w.Wv = attn->v_proj->weight;
  w.Wo = attn->o_proj->weight, w.bq = attn->q_proj->bias, w.bk = attn->k_proj->bias;
  w.bv = attn->v_proj->bias, w.bo = attn->o_proj->bias;
  w.q_norm = attn->q_norm->weight, w.k_norm = attn->k_norm->weight;
  w.Nh = 4, w.Nkv = 1, w.D = c.head_dim, w.eps = c.rms_norm_eps, w.theta = c.rope_theta;
  EXPECT_TRUE(at::allclose(got[0].to(at::kDouble), attention_ref(w, x[0], pos, seg), 1e-5, 1e-5));
  // What sits in a padding slot cannot change the real tokens.
  at::Tensor x2 = x.clone();
  x2[0][5].fill_(1e3);
  EXPECT_TRUE(at::allclose(attn->forward(x2, ctx)[0].narrow(0, 0, 5), got[0].narrow(0, 0, 5), 0, 1e-6));
}

TEST(Attention, SequenceLayoutFindsEverySequenceAndItsOffsets) {
  std::vector<std::vector<int64_t>> seg = {{0, 0, 1, 1, -1, -1}, {0, 0, 0, -1, 2, 2}};
  SequenceLayout l = sequence_layout(at::cat({row(seg[0]), row(seg[1])}, 0), c10::Device(c10::kCPU));
  EXPECT_EQ(l.rows, 2);
  EXPECT_EQ(l.seq_len, 6);
  EXPECT_FALSE(l.rows_alike);
  // {row, start, length, padding}
  std::vector<std::vector<int64_t>> want = {{0, 0, 2, 0}, {0, 2, 2, 0}, {0, 4, 2, 1},
                                            {1, 0, 3, 0}, {1, 3, 1, 1}, {1, 4, 2, 0}};
  ASSERT_EQ(l.spans.size(), want.size());
  for (size_t n = 0; n < want.size(); ++n) {
    const auto& s = l.spans[n];
    EXPECT_EQ((std::vector<int64_t>{s.row, s.start, s.length, int64_t(s.padding)}), want[n]) << n;
  }
  // Each padding token is a sequence of its own in the flat offsets.
  at::Tensor cu = l.cu_seqlens;
  EXPECT_EQ(cu.scalar_type(), at::kInt);
  std::vector<int32_t> offsets(cu.data_ptr<int32_t>(), cu.data_ptr<int32_t>() + cu.numel());
  EXPECT_EQ(offsets, (std::vector<int32_t>{0, 2, 4, 5, 6, 9, 10, 12}));
  EXPECT_EQ(l.max_length, 3);

  SequenceLayout alike = sequence_layout(at::tensor({0, 0, 1, -1, 0, 0, 1, -1}, at::kLong).view({2, 4}),
                                         c10::Device(c10::kCPU));
  EXPECT_TRUE(alike.rows_alike);
  EXPECT_FALSE(sequence_layout(at::tensor({0, 0, 1, -1, 0, 1, 1, -1}, at::kLong).view({2, 4}),
                               c10::Device(c10::kCPU))
                   .rows_alike);
  // A segment id that comes back after another is not a sequence.
  try {
    sequence_layout(row({0, 0, 1, 0}), c10::Device(c10::kCPU));
    ADD_FAILURE() << "a split segment was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("segment 0 again at position 3"), std::string::npos) << e.what();
  }
}

// sequence_attention against the formula, one query at a time in float64, for packed rows,
// padding between and after sequences, rows alike and not, and grouped kv heads.
TEST(Attention, SequenceAttentionMatchesTheFormulaForEveryLayout) {
  at::manual_seed(31);
  const int64_t N = 4, Nkv = 2, D = 3;
  const std::vector<std::vector<std::vector<int64_t>>> layouts = {
      {{0, 0, 0, 0, 0}},                                   // one sequence fills the row
      {{0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}},                  // rows alike, one kernel
      {{0, 0, 1, 1, -1}, {0, 0, 1, 1, -1}},                // rows alike, packed and padded
      {{0, 0, 1, 1, 1}, {0, -1, -1, 3, 3}, {-1, -1, -1, -1, -1}},  // rows differ
  };
  for (const auto& seg : layouts) {
    const int64_t B = seg.size(), S = seg[0].size();
    std::vector<at::Tensor> rows;
    for (const auto& r : seg) rows.push_back(row(r));
    SequenceLayout layout = sequence_layout(at::cat(rows, 0), c10::Device(c10::kCPU));
    auto f64 = at::TensorOptions().dtype(at::kDouble);
    at::Tensor q = at::randn({B, N, S, D}, f64).requires_grad_(true);
    at::Tensor k = at::randn({B, Nkv, S, D}, f64).requires_grad_(true);
    at::Tensor v = at::randn({B, Nkv, S, D}, f64).requires_grad_(true);
    at::Tensor got = sequence_attention(q, k, v, layout);
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{B, S, N * D}));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < N; ++h)
        for (int64_t i = 0; i < S; ++i) {
          const int64_t kv = h / (N / Nkv);
          std::vector<int64_t> keys;
          for (int64_t j = 0; j <= i; ++j)
            if (seg[b][i] < 0 ? j == i : seg[b][j] == seg[b][i]) keys.push_back(j);
          std::vector<double> p;
          for (int64_t j : keys)
            p.push_back((q[b][h][i] * k[b][kv][j]).sum().item<double>() / std::sqrt(double(D)));
          double mx = *std::max_element(p.begin(), p.end()), z = 0;
          for (double& s : p) z += s = std::exp(s - mx);
          at::Tensor want = at::zeros({D}, f64);
          for (size_t n = 0; n < keys.size(); ++n) want += p[n] / z * v[b][kv][keys[n]].detach();
          EXPECT_TRUE(at::allclose(got[b][i].narrow(0, h * D, D), want, 1e-12, 1e-12))
              << "layout " << &seg - &layouts[0] << " row " << b << " head " << h << " query " << i;
        }
    // Gradients: the same sums with the whole-row masked softmax (autograd through plain ops).
    at::Tensor probe = at::randn(got.sizes(), f64);
    (got * probe).sum().backward();
    at::Tensor allowed = at::zeros({B, 1, S, S}, at::kBool);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j <= i; ++j) allowed[b][0][i][j] = seg[b][i] < 0 ? j == i : seg[b][j] == seg[b][i];
    at::Tensor q2 = q.detach().requires_grad_(true), k2 = k.detach().requires_grad_(true);
    at::Tensor v2 = v.detach().requires_grad_(true);
    at::Tensor kk = k2.repeat_interleave(N / Nkv, 1), vv = v2.repeat_interleave(N / Nkv, 1);
    at::Tensor scores = at::matmul(q2, kk.transpose(-1, -2)) / std::sqrt(double(D));
    at::Tensor dense = at::matmul(at::softmax(scores.masked_fill(allowed.logical_not(), -INFINITY), -1), vv);
    (dense.transpose(1, 2).reshape({B, S, N * D}) * probe).sum().backward();
    EXPECT_TRUE(at::allclose(q.grad(), q2.grad(), 1e-11, 1e-12));
    EXPECT_TRUE(at::allclose(k.grad(), k2.grad(), 1e-11, 1e-12));
    EXPECT_TRUE(at::allclose(v.grad(), v2.grad(), 1e-11, 1e-12));
  }
}

TEST(Attention, RotaryTablesMatchTheirFormulas) {
  const int64_t D = 6;
  const double theta = 300.0;
  at::Tensor pos = at::tensor({0, 5, 2, 17}, at::kLong).view({2, 2});
  RotaryTables t64 = rotary_tables(pos, D, theta, at::kDouble), t32 = rotary_tables(pos, D, theta);
  ASSERT_EQ(t64.cos.sizes(), (std::vector<int64_t>{2, 2, D}));
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 2; ++s)
      for (int64_t d = 0; d < D; ++d) {
        double angle = double(pos[b][s].item<int64_t>()) * std::pow(theta, -2.0 * double(d % (D / 2)) / double(D));
        EXPECT_NEAR(t64.cos[b][s][d].item<double>(), std::cos(angle), 1e-12);
        EXPECT_NEAR(t64.sin[b][s][d].item<double>(), std::sin(angle), 1e-12);
        EXPECT_NEAR(t32.cos[b][s][d].item<double>(), std::cos(angle), 2e-5);
        EXPECT_NEAR(t32.sin[b][s][d].item<double>(), std::sin(angle), 2e-5);
      }
  // apply_rotary on [B, Nh, S, D] rotates each head vector by its own position.
  at::Tensor x = at::randn({2, 3, 2, D}, at::kDouble);
  at::Tensor y = apply_rotary(x, t64);
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 3; ++h)
      for (int s = 0; s < 2; ++s)
        EXPECT_TRUE(at::allclose(y[b][h][s], rope_ref(x[b][h][s], pos[b][s].item<int64_t>(), theta), 1e-12, 1e-12));
}

TEST(Model, InitWeightsIsDeterministicAndFollowsTransformers) {
  ModelConfig c = decoder_config();
  c.attention_bias = true;
  CausalLM a(c, kF32), b(c, kF32), other(c, kF32);
  init_weights(*a, 7);
  init_weights(*b, 7);
  init_weights(*other, 8);
  auto pb = b->named_parameters(), po = other->named_parameters();
  for (const auto& item : a->named_parameters()) {
    const std::string& k = item.key();
    EXPECT_TRUE(at::equal(item.value(), pb[k])) << k;
    bool norm = k.find("norm.weight") != std::string::npos, bias = k.find(".bias") != std::string::npos;
    if (norm) EXPECT_TRUE(at::equal(item.value(), at::ones_like(item.value()))) << k;
    if (bias) EXPECT_TRUE(at::equal(item.value(), at::zeros_like(item.value()))) << k;
    if (!norm && !bias) {
      EXPECT_FALSE(at::equal(item.value(), po[k])) << k;
      EXPECT_NEAR(item.value().std().item<double>(), c.initializer_range, 0.5 * c.initializer_range) << k;
      EXPECT_NEAR(item.value().mean().item<double>(), 0.0, c.initializer_range) << k;
    }
  }
}

}  // namespace
}  // namespace glint
