// The DeepSeek-V4 attention sublayer against the independent float64 reference
// (tests/model/reference_deepseek_v4.h) for each layer kind: outputs, packed sequences
// against the same sequences run alone, gradients by central finite differences, and a
// LoRA adapter on the grouped o_a_proj against the merged weight.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "model/deepseek_v4/attention.h"
#include "model/reference_deepseek_v4.h"
#include "model_util.h"
#include "model/deepseek_v4/config.h"

namespace glint {
namespace {

using glint::testing::max_rel_err;

using glint::testing::kF64;

using nlohmann::json;
namespace ref = glint::testing::dsv4_ref;

const char* kSliding = "sliding_attention";
const char* kCsa = "compressed_sparse_attention";
const char* kHca = "heavily_compressed_attention";

ModelConfig tiny_config(int64_t index_topk) {
  ModelConfig c;
  c.model_type = "deepseek_v4";
  c.hidden_size = 16;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 1;
  c.head_dim = 16;
  v4(c).qk_rope_head_dim = 8;
  c.partial_rotary_factor = 0.5;
  v4(c).q_lora_rank = 12;
  v4(c).o_groups = 2;
  v4(c).o_lora_rank = 6;
  c.sliding_window = 5;
  v4(c).compress_rate_csa = 4;
  v4(c).compress_rate_hca = 8;
  v4(c).index_n_heads = 2;
  v4(c).index_head_dim = 8;
  v4(c).index_topk = index_topk;
  c.rope_theta = 10000.0;
  v4(c).compress_rope_theta = 160000.0;
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.rope_scaling.attention_factor = 1.0;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-6;
  c.layer_types = {kSliding, kCsa, kHca};
  return c;
}

// The same configuration as the reference reads it from a config.json.
ref::Config reference_config(const ModelConfig& c) {
  json j = {{"hidden_size", c.hidden_size},
            {"num_hidden_layers", c.num_hidden_layers},
            {"num_attention_heads", c.num_attention_heads},
            {"head_dim", c.head_dim},
            {"qk_rope_head_dim", v4(c).qk_rope_head_dim},
            {"q_lora_rank", v4(c).q_lora_rank},
            {"o_groups", v4(c).o_groups},
            {"o_lora_rank", v4(c).o_lora_rank},
            {"sliding_window", c.sliding_window},
            {"compress_rate_csa", v4(c).compress_rate_csa},
            {"compress_rate_hca", v4(c).compress_rate_hca},
            {"index_n_heads", v4(c).index_n_heads},
            {"index_head_dim", v4(c).index_head_dim},
            {"index_topk", v4(c).index_topk},
            {"rope_theta", c.rope_theta},
            {"compress_rope_theta", v4(c).compress_rope_theta},
            {"rope_scaling",
             {{"type", "yarn"},
              {"factor", c.rope_scaling.factor},
              {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}}},
            {"max_position_embeddings", c.max_position_embeddings},
            {"rms_norm_eps", c.rms_norm_eps},
            {"layer_types", c.layer_types}};
  return ref::parse_config(j);
}

// Linear weights ~ 1/sqrt(in) (gates twice that), norm weights around 1, sinks and
// position biases ~ 1.
void randomize_module(torch::nn::Module& m, uint64_t seed) {
  at::NoGradGuard ng;
  at::manual_seed(seed);
  for (auto& item : m.named_parameters()) {
    const std::string& k = item.key();
    at::Tensor p = item.value();
    at::Tensor r = at::randn(p.sizes(), p.options().dtype(at::kDouble));
    if (k.find("norm.weight") != std::string::npos)
      r = 1.0 + 0.1 * r;
    else if (p.dim() == 2 && k.find("position_bias") == std::string::npos)
      r = r * ((k.find("gate_proj") != std::string::npos ? 2.0 : 1.0) / std::sqrt(double(p.size(1))));
    p.copy_(r);
  }
}

// The reference's weights of this layer, read from the module under the transformers names.
ref::LayerW reference_layer(DeepseekV4AttentionImpl& m, const ref::Config& c, std::map<std::string, at::Tensor>& w) {
  for (auto& item : m.named_parameters()) w[item.key()] = item.value().detach().clone();
  ref::WeightReader r(w);
  const int64_t H = c.hidden, D = c.head_dim;
  ref::LayerW L;
  L.type = m.kind;
  L.q_a = r.mat("q_a_proj.weight", c.q_lora, H);
  L.q_a_norm = r.vec("q_a_norm.weight", c.q_lora);
  L.q_b = r.mat("q_b_proj.weight", c.heads * D, c.q_lora);
  L.kv = r.mat("kv_proj.weight", D, H);
  L.kv_norm = r.vec("kv_norm.weight", D);
  L.o_a = r.mat("o_a_proj.weight", c.o_groups * c.o_lora, c.heads * D / c.o_groups);
  L.o_b = r.mat("o_b_proj.weight", H, c.o_groups * c.o_lora);
  L.sinks = r.vec("sinks", c.heads);
  auto compressor = [&](const std::string& q, int64_t rate, int64_t dim, bool overlap) {
    ref::CompressorW cw;
    const int64_t C = overlap ? 2 * dim : dim;
    cw.kv = r.mat(q + "kv_proj.weight", C, H);
    cw.gate = r.mat(q + "gate_proj.weight", C, H);
    cw.ape = r.mat(q + "position_bias", rate, C);
    cw.norm = r.vec(q + "kv_norm.weight", dim);
    cw.m = rate;
    cw.dim = dim;
    cw.overlap = overlap;
    return cw;
  };
  if (L.type == kHca) {
    L.has_comp = true;
    L.comp = compressor("compressor.", c.rate_hca, D, false);
  } else if (L.type == kCsa) {
    L.has_comp = L.has_indexer = true;
    L.comp = compressor("compressor.", c.rate_csa, D, true);
    L.idx_comp = compressor("compressor.indexer.", c.rate_csa, c.index_head_dim, true);
    L.idx_q_b = r.mat("compressor.indexer.q_b_proj.weight", c.index_heads * c.index_head_dim, c.q_lora);
    L.idx_w = r.mat("compressor.indexer.scorer.weights_proj.weight", c.index_heads, H);
  }
  return L;
}

// Position ids restarting at every change of segment id ([B,S] int64).
at::Tensor positions_of(const at::Tensor& seg) {
  at::Tensor s = seg.contiguous(), pos = at::zeros_like(s);
  const int64_t B = s.size(0), S = s.size(1);
  auto sa = s.accessor<int64_t, 2>();
  auto pa = pos.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 1; t < S; ++t) pa[b][t] = sa[b][t] == sa[b][t - 1] && sa[b][t] >= 0 ? pa[b][t - 1] + 1 : 0;
  return pos;
}

LayerContext context(const ModelConfig& c, const at::Tensor& seg) {
  at::Tensor pos = positions_of(seg);
  ModelConfig::RopeScaling none;
  LayerContext ctx;
  ctx.layout = sequence_layout(seg, c10::Device(c10::kCPU));
  ctx.rope = {rotary_tables(pos, rope_inv_freq(v4(c).qk_rope_head_dim, c.rope_theta, none), 1.0, at::kDouble),
              rotary_tables(pos, rope_inv_freq(v4(c).qk_rope_head_dim, v4(c).compress_rope_theta, c.rope_scaling),
                            rope_attention_factor(c.rope_scaling), at::kDouble)};
  return ctx;
}

at::Tensor one_sequence(int64_t B, int64_t S) { return at::zeros({B, S}, at::kLong); }

// max |a - b| / max |b|.

std::vector<ref::Vec> rows_of(const at::Tensor& x) {  // [S,H] -> [S][H]
  at::Tensor c = x.contiguous();
  std::vector<ref::Vec> out;
  for (int64_t t = 0; t < c.size(0); ++t) out.emplace_back(c[t].data_ptr<double>(), c[t].data_ptr<double>() + c.size(1));
  return out;
}

at::Tensor tensor_of(const std::vector<ref::Vec>& rows) {
  at::Tensor t = at::empty({int64_t(rows.size()), int64_t(rows[0].size())}, at::kDouble);
  for (size_t i = 0; i < rows.size(); ++i) std::copy(rows[i].begin(), rows[i].end(), t[i].data_ptr<double>());
  return t;
}

TEST(DeepseekV4Attention, RegistersTheTransformersNamesAndShapes) {
  ModelConfig c = tiny_config(2);
  std::map<std::string, std::vector<int64_t>> want = {
      {"q_a_proj.weight", {12, 16}}, {"q_a_norm.weight", {12}},  {"q_b_proj.weight", {64, 12}},
      {"kv_proj.weight", {16, 16}},  {"kv_norm.weight", {16}},   {"o_a_proj.weight", {12, 32}},
      {"o_b_proj.weight", {16, 12}}, {"sinks", {4}}};
  std::map<std::string, std::vector<int64_t>> csa = want, hca = want;
  csa.insert({{"compressor.kv_proj.weight", {32, 16}},
              {"compressor.gate_proj.weight", {32, 16}},
              {"compressor.kv_norm.weight", {16}},
              {"compressor.position_bias", {4, 32}},
              {"compressor.indexer.q_b_proj.weight", {16, 12}},
              {"compressor.indexer.kv_proj.weight", {16, 16}},
              {"compressor.indexer.gate_proj.weight", {16, 16}},
              {"compressor.indexer.kv_norm.weight", {8}},
              {"compressor.indexer.position_bias", {4, 16}},
              {"compressor.indexer.scorer.weights_proj.weight", {2, 16}}});
  hca.insert({{"compressor.kv_proj.weight", {16, 16}},
              {"compressor.gate_proj.weight", {16, 16}},
              {"compressor.kv_norm.weight", {16}},
              {"compressor.position_bias", {8, 16}}});
  std::vector<std::map<std::string, std::vector<int64_t>>> expected = {want, csa, hca};
  for (int64_t layer = 0; layer < 3; ++layer) {
    DeepseekV4Attention m(c, layer, TensorPlacement{at::kBFloat16, c10::Device(c10::kCPU)});
    std::map<std::string, std::vector<int64_t>> got;
    for (auto& item : m->named_parameters()) {
      got[item.key()] = item.value().sizes().vec();
      // One dtype for every parameter: FSDP flattens a layer into one buffer.
      EXPECT_EQ(item.value().scalar_type(), at::kBFloat16) << item.key();
    }
    EXPECT_EQ(got, expected[layer]) << c.layer_types[layer];
  }
}

TEST(DeepseekV4Attention, MatchesTheReferenceForEveryLayerKind) {
  const int64_t B = 2, S = 40;
  // index_topk 2: the indexer picks among up to 10 entries; 64: every causal entry is kept.
  for (int64_t topk : {2, 64}) {
    ModelConfig c = tiny_config(topk);
    ref::Config rc = reference_config(c);
    LayerContext ctx = context(c, one_sequence(B, S));
    at::manual_seed(7);
    at::Tensor x = at::randn({B, S, c.hidden_size}, at::kDouble);
    for (int64_t layer = 0; layer < 3; ++layer) {
      if (topk == 64 && layer != 1) continue;
      DeepseekV4Attention m(c, layer, kF64);
      randomize_module(*m, 100 + layer);
      std::map<std::string, at::Tensor> w;
      ref::LayerW L = reference_layer(*m, rc, w);
      for (int64_t block : {7, 128}) {
        m->query_block = block;
        at::Tensor y = m->forward(x, ctx);
        ASSERT_EQ(y.sizes(), x.sizes());
        double err = 0;
        for (int64_t b = 0; b < B; ++b)
          err = std::max(err, max_rel_err(y[b], tensor_of(ref::attention(rc, L, rows_of(x[b])))));
        std::cout << "[ measured ] " << m->kind << " topk " << topk << " block " << block << ": max rel err " << err
                  << "\n";
        EXPECT_LT(err, 1e-12) << m->kind << " topk " << topk << " block " << block;
      }
    }
  }
}

// The checks above would not see a wrong selection if it changed nothing: it does.
TEST(DeepseekV4Attention, TheIndexerSelectionAndTheEntriesMatter) {
  const int64_t S = 40;
  at::manual_seed(3);
  at::Tensor x = at::randn({1, S, 16}, at::kDouble);
  ModelConfig sparse = tiny_config(2), dense = tiny_config(64);
  LayerContext ctx = context(sparse, one_sequence(1, S));
  DeepseekV4Attention a(sparse, 1, kF64), b(dense, 1, kF64);
  randomize_module(*a, 17);
  randomize_module(*b, 17);
  EXPECT_GT(max_rel_err(a->forward(x, ctx), b->forward(x, ctx)), 1e-3);
  // Entries of HCA: zero their values' weights and the output moves.
  DeepseekV4Attention h(sparse, 2, kF64);
  randomize_module(*h, 18);
  at::Tensor with = h->forward(x, ctx);
  {
    at::NoGradGuard ng;
    h->compressor->kv_proj->weight.zero_();
  }
  EXPECT_GT(max_rel_err(h->forward(x, ctx), with), 1e-3);
}

TEST(DeepseekV4Attention, PackedSequencesEqualTheSameSequencesAlone) {
  ModelConfig c = tiny_config(2);
  const int64_t S = 40, La = 21, Lb = 15;
  // Row 0: two sequences and 4 padding tokens; row 1: one sequence of 10, one of 30.
  std::vector<int64_t> s0, s1;
  for (int64_t t = 0; t < S; ++t) s0.push_back(t < La ? 0 : t < La + Lb ? 1 : -1);
  for (int64_t t = 0; t < S; ++t) s1.push_back(t < 10 ? 0 : 1);
  at::Tensor seg = at::stack({at::tensor(s0, at::kLong), at::tensor(s1, at::kLong)}, 0);
  LayerContext packed = context(c, seg);
  at::manual_seed(11);
  at::Tensor x = at::randn({2, S, c.hidden_size}, at::kDouble);
  struct Piece {
    int64_t row, start, length;
  };
  std::vector<Piece> pieces = {{0, 0, La}, {0, La, Lb}, {1, 0, 10}, {1, 10, 30}};
  for (int64_t layer = 0; layer < 3; ++layer) {
    DeepseekV4Attention m(c, layer, kF64);
    randomize_module(*m, 200 + layer);
    m->query_block = 8;
    at::Tensor y = m->forward(x, packed);
    double err = 0;
    for (const Piece& p : pieces) {
      at::Tensor xs = x[p.row].narrow(0, p.start, p.length).unsqueeze(0);
      at::Tensor alone = m->forward(xs, context(c, one_sequence(1, p.length)))[0];
      err = std::max(err, max_rel_err(y[p.row].narrow(0, p.start, p.length), alone));
    }
    std::cout << "[ measured ] " << m->kind << " packed vs alone: max rel err " << err << "\n";
    EXPECT_LT(err, 1e-13) << m->kind;
    EXPECT_TRUE(at::isfinite(y).all().item<bool>()) << m->kind;
    // A padding token sees only itself: changing the other tokens leaves it unchanged.
    at::Tensor x2 = x.clone();
    x2[0].narrow(0, 0, La + Lb).add_(1.0);
    at::Tensor y2 = m->forward(x2, packed);
    EXPECT_TRUE(at::equal(y2[0].narrow(0, La + Lb, 4), y[0].narrow(0, La + Lb, 4))) << m->kind;
  }
}

TEST(DeepseekV4Attention, GradientsMatchFiniteDifferences) {
  ModelConfig c = tiny_config(2);
  const int64_t S = 28;
  LayerContext ctx = context(c, one_sequence(1, S));
  at::manual_seed(5);
  at::Tensor x = at::randn({1, S, c.hidden_size}, at::kDouble);
  at::Tensor probe = at::randn({1, S, c.hidden_size}, at::kDouble);
  for (int64_t layer = 0; layer < 3; ++layer) {
    DeepseekV4Attention m(c, layer, kF64);
    randomize_module(*m, 300 + layer);
    m->query_block = 8;
    auto loss = [&] { return (m->forward(x, ctx) * probe).sum(); };
    for (auto& p : m->parameters()) p.mutable_grad() = at::Tensor();
    loss().backward();
    auto params = m->named_parameters();
    std::vector<std::string> names = {"q_a_proj.weight", "q_b_proj.weight", "kv_proj.weight", "kv_norm.weight",
                                      "o_a_proj.weight", "o_b_proj.weight", "sinks"};
    if (m->compressor)
      for (const char* n : {"compressor.position_bias", "compressor.gate_proj.weight", "compressor.kv_proj.weight",
                            "compressor.kv_norm.weight"})
        names.push_back(n);
    double worst = 0;
    for (const std::string& name : names) {
      at::Tensor p = params[name];
      ASSERT_TRUE(p.grad().defined()) << name;
      at::Tensor flat = p.view(-1), g = p.grad().view(-1);
      for (int64_t i : {int64_t(0), p.numel() / 3, p.numel() - 1}) {
        const double h = 1e-5, keep = flat[i].item<double>();
        double plus, minus;
        {
          at::NoGradGuard ng;
          flat[i].fill_(keep + h);
          plus = loss().item<double>();
          flat[i].fill_(keep - h);
          minus = loss().item<double>();
          flat[i].fill_(keep);
        }
        const double fd = (plus - minus) / (2 * h), ad = g[i].item<double>();
        const double err = std::abs(fd - ad) / std::max(std::abs(ad), 1e-2);
        worst = std::max(worst, err);
        EXPECT_LT(err, 1e-6) << m->kind << " " << name << "[" << i << "]: fd " << fd << " autograd " << ad;
      }
    }
    std::cout << "[ measured ] " << m->kind << " gradients: max rel err " << worst << "\n";
    // The indexer only selects: none of its parameters gets a gradient.
    if (m->compressor && m->compressor->indexer) {
      for (auto& p : m->compressor->indexer->parameters()) EXPECT_FALSE(p.grad().defined());
    }
  }
}

// delta(x) = x A^T B^T: the merged weight is W + B A.
class LowRank : public LinearAdapter {
 public:
  LowRank(at::Tensor a, at::Tensor b) : A(std::move(a)), B(std::move(b)) {}
  at::Tensor delta(const at::Tensor& x) const override { return at::matmul(at::matmul(x, A.t()), B.t()); }
  double kept_per_row() const override { return double(A.size(0)); }
  at::Tensor A, B;  // [r,in], [out,r]
};

TEST(DeepseekV4Attention, AdapterOnTheGroupedOutputEqualsTheMergedWeight) {
  ModelConfig c = tiny_config(2);
  const int64_t S = 24;
  LayerContext ctx = context(c, one_sequence(2, S));
  at::manual_seed(9);
  at::Tensor x = at::randn({2, S, c.hidden_size}, at::kDouble);
  for (int64_t layer = 0; layer < 3; ++layer) {
    DeepseekV4Attention adapted(c, layer, kF64), merged(c, layer, kF64);
    randomize_module(*adapted, 400 + layer);
    randomize_module(*merged, 400 + layer);
    const at::Tensor& W = adapted->o_a_proj->weight;
    at::Tensor A = at::randn({3, W.size(1)}, at::kDouble), B = at::randn({W.size(0), 3}, at::kDouble);
    adapted->o_a_proj->adapter = std::make_shared<LowRank>(A, B);
    {
      at::NoGradGuard ng;
      merged->o_a_proj->weight.add_(at::matmul(B, A));
    }
    double err = max_rel_err(adapted->forward(x, ctx), merged->forward(x, ctx));
    std::cout << "[ measured ] " << adapted->kind << " adapter vs merged: max rel err " << err << "\n";
    EXPECT_LT(err, 1e-12) << adapted->kind;
  }
}

TEST(DeepseekV4Attention, LowerPrecisionsFollowFloat64) {
  ModelConfig c = tiny_config(2);
  const int64_t S = 40;
  at::manual_seed(13);
  at::Tensor x = at::randn({1, S, c.hidden_size}, at::kDouble);
  for (int64_t layer = 0; layer < 3; ++layer) {
    DeepseekV4Attention m64(c, layer, kF64), m32(c, layer, TensorPlacement{at::kFloat, c10::Device(c10::kCPU)});
    randomize_module(*m64, 500 + layer);
    randomize_module(*m32, 500 + layer);
    LayerContext ctx = context(c, one_sequence(1, S));
    at::Tensor y64 = m64->forward(x, ctx);
    for (auto& t : ctx.rope) t = {t.cos.to(at::kFloat), t.sin.to(at::kFloat)};
    at::Tensor y32 = m32->forward(x.to(at::kFloat), ctx);
    EXPECT_EQ(y32.scalar_type(), at::kFloat);
    double err = max_rel_err(y32.to(at::kDouble), y64);
    std::cout << "[ measured ] " << m64->kind << " float32 vs float64: max rel err " << err << "\n";
    EXPECT_LT(err, 1e-4) << m64->kind;
    // bfloat16 weights (sinks and position biases too) and activations.
    DeepseekV4Attention m16(c, layer, TensorPlacement{at::kBFloat16, c10::Device(c10::kCPU)});
    randomize_module(*m16, 500 + layer);
    at::Tensor y16 = m16->forward(x.to(at::kBFloat16), ctx);
    EXPECT_EQ(y16.scalar_type(), at::kBFloat16);
    double err16 = max_rel_err(y16.to(at::kDouble), y64);
    std::cout << "[ measured ] " << m64->kind << " bfloat16 vs float64: max rel err " << err16 << "\n";
    EXPECT_LT(err16, 0.1) << m64->kind;
  }
}

TEST(DeepseekV4Attention, ScoreMacsCountWindowEntriesAndIndexer) {
  ModelConfig c = tiny_config(2);
  DeepseekV4Attention sliding(c, 0, kF64), csa(c, 1, kF64), hca(c, 2, kF64);
  // 4 heads x 16 dims x (score + value) per key.
  EXPECT_DOUBLE_EQ(sliding->score_macs_per_token(1000), 2.0 * 4 * 16 * 5);
  EXPECT_DOUBLE_EQ(hca->score_macs_per_token(1000), 2.0 * 4 * 16 * (5 + 125 / 2.0) + 16);
  // 250 entries, 2 kept; pooling 32 channels, the indexer's 16, and 2 x 8 x 125 scores.
  EXPECT_DOUBLE_EQ(csa->score_macs_per_token(1000), 2.0 * 4 * 16 * (5 + 2) + 32 + 16 + 2 * 8 * 125.0);
}

}  // namespace
}  // namespace glint
