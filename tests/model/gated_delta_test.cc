// The chunked gated delta rule and the causal depthwise conv against per-token / per-position
// loops (tests/model/reference_gated_delta.h): chunk sizes that do and do not divide the
// lengths, packed rows with padding, gradients against finite differences, restarts at
// sequence boundaries in both directions of autograd.
//
// Legend: B rows, S positions, H value heads, Dk key dim, Dv value dim, C channels, W width.
#include "model/qwen3_5/gated_delta.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <tuple>
#include <vector>

#include "aten_threads.h"
#include "core/cpu_kernels.h"
#include "core/error.h"
#include "model/layers.h"
#include "reference_gated_delta.h"

namespace glint {
namespace {

using namespace glint::testing;

const auto kDeltaF64Options = at::TensorOptions().dtype(at::kDouble);

SequenceLayout layout_of(const std::vector<std::vector<int64_t>>& segments) {
  std::vector<at::Tensor> rows;
  for (const auto& r : segments) rows.push_back(at::tensor(r, at::kLong).unsqueeze(0));
  return sequence_layout(at::cat(rows, 0), c10::Device(c10::kCPU));
}

// Inputs shaped as the model makes them: unit-norm keys, q scaled by Dk^-1/2, decays in
// (-2, 0), beta in (0, 1).
struct Inputs {
  at::Tensor q, k, v, g, beta;  // [B,S,H,Dk] x2, [B,S,H,Dv], [B,S,H] x2
};
Inputs random_inputs(int64_t B, int64_t S, int64_t H, int64_t Dk, int64_t Dv, at::TensorOptions opts = kDeltaF64Options) {
  Inputs in;
  in.q = at::randn({B, S, H, Dk}, opts);
  in.q = in.q / in.q.norm(2, -1, true) / std::sqrt(double(Dk));
  in.k = at::randn({B, S, H, Dk}, opts);
  in.k = in.k / in.k.norm(2, -1, true);
  in.v = at::randn({B, S, H, Dv}, opts);
  in.g = -2.0 * at::rand({B, S, H}, opts);
  in.beta = at::rand({B, S, H}, opts);
  return in;
}

at::Tensor run(const Inputs& in, const SequenceLayout& layout, int64_t chunk) {
  return gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, layout, chunk);
}

// The reference on positions [start, start+length) of row b.
at::Tensor ref_span(const Inputs& in, int64_t b, int64_t start, int64_t length) {
  auto cut = [&](const at::Tensor& t) { return t[b].narrow(0, start, length); };
  return gated_delta_rule_ref(cut(in.q), cut(in.k), cut(in.v), cut(in.g), cut(in.beta));
}

double delta_max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Every non-padding sequence of `layout` against the reference run on it alone; padding
// outputs must be finite.
void expect_matches_reference(const Inputs& in, const SequenceLayout& layout, const at::Tensor& got, double tol) {
  ASSERT_TRUE(at::isfinite(got).all().item<bool>());
  for (const auto& s : layout.spans) {
    if (s.padding) continue;
    EXPECT_LT(delta_max_diff(got[s.row].narrow(0, s.start, s.length), ref_span(in, s.row, s.start, s.length)), tol)
        << "row " << s.row << " span [" << s.start << ", +" << s.length << ")";
  }
}

TEST(GatedDeltaRule, ReferenceRecurrenceMatchesHandComputedSteps) {
  // Dk = Dv = 1, one head, two tokens:
  //   S1 = b1 k1 v1, o1 = S1 q1;
  //   S2 = e^{g2} S1 + k2 b2 (v2 - e^{g2} S1 k2), o2 = S2 q2.
  const double q1 = 0.5, k1 = 2.0, v1 = 3.0, g1 = -0.3, b1 = 0.25;
  const double q2 = -1.5, k2 = 0.5, v2 = -1.0, g2 = -0.7, b2 = 0.8;
  auto col = [](double a, double b) { return at::tensor({a, b}, kDeltaF64Options).view({2, 1, 1}); };
  at::Tensor o =
      gated_delta_rule_ref(col(q1, q2), col(k1, k2), col(v1, v2), col(g1, g2).view({2, 1}), col(b1, b2).view({2, 1}));
  const double S1 = b1 * k1 * v1;
  const double S2 = std::exp(g2) * S1 + k2 * b2 * (v2 - std::exp(g2) * S1 * k2);
  EXPECT_NEAR(o[0][0][0].item<double>(), S1 * q1, 1e-15);
  EXPECT_NEAR(o[1][0][0].item<double>(), S2 * q2, 1e-15);
}

TEST(GatedDeltaRule, ChunkedMatchesRecurrenceForEveryChunkSize) {
  at::manual_seed(1);
  const int64_t H = 3, Dk = 4, Dv = 5;
  for (int64_t length : {1, 3, 4, 9, 70})
    for (int64_t chunk : {1, 2, 3, 4, 64}) {
      Inputs in = random_inputs(1, length, H, Dk, Dv);
      SequenceLayout layout = layout_of({std::vector<int64_t>(length, 0)});
      at::Tensor got = run(in, layout, chunk);
      ASSERT_EQ(got.sizes(), (std::vector<int64_t>{1, length, H, Dv}));
      EXPECT_LT(delta_max_diff(got[0], ref_span(in, 0, 0, length)), 1e-10) << "length " << length << " chunk " << chunk;
    }
}

TEST(GatedDeltaRule, PackedRowsMatchEachSequenceAlone) {
  at::manual_seed(2);
  const int64_t H = 2, Dk = 3, Dv = 4;
  const std::vector<std::vector<std::vector<int64_t>>> layouts = {
      // rows differ: sequences back to back, padding between and after, a row of padding
      {{0, 0, 0, 1, 1, 1, 1, 1, -1, -1, 2, 2, 2, 2, 2, -1},
       {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, -1, 7, 7, 7, -1},
       {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
       {0, 1, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}},
      // rows alike, different data
      {{0, 0, 0, 0, 0, 1, 1, -1, 2, 2, 2, 2, 2, 2, 2, 2}, {0, 0, 0, 0, 0, 1, 1, -1, 2, 2, 2, 2, 2, 2, 2, 2}},
  };
  for (const auto& segments : layouts) {
    SequenceLayout layout = layout_of(segments);
    Inputs in = random_inputs(layout.rows, layout.seq_len, H, Dk, Dv);
    for (int64_t chunk : {3, 4, 64}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + (layout.rows_alike ? ", rows alike" : ", rows differ"));
      at::Tensor got = run(in, layout, chunk);
      ASSERT_EQ(got.sizes(), (std::vector<int64_t>{layout.rows, layout.seq_len, H, Dv}));
      expect_matches_reference(in, layout, got, 1e-10);
    }
  }
  // The same data run as one sequence per row gives other outputs: the packed layouts above
  // really do cut state that would otherwise flow across.
  SequenceLayout packed = layout_of({{0, 0, 0, 1, 1, 1}});
  Inputs in = random_inputs(1, 6, H, Dk, Dv);
  EXPECT_GT(delta_max_diff(run(in, packed, 4), run(in, layout_of({{0, 0, 0, 0, 0, 0}}), 4)), 1e-3);
}

TEST(GatedDeltaRule, Float32AndBFloat16ReturnTheirDtypeAndStayClose) {
  at::manual_seed(3);
  const int64_t H = 2, Dk = 16, Dv = 8, S = 150;
  SequenceLayout layout = layout_of({std::vector<int64_t>(S, 0)});
  Inputs in = random_inputs(1, S, H, Dk, Dv);
  at::Tensor want = ref_span(in, 0, 0, S);
  Inputs f32{in.q.to(at::kFloat), in.k.to(at::kFloat), in.v.to(at::kFloat), in.g.to(at::kFloat),
             in.beta.to(at::kFloat)};
  at::Tensor got = run(f32, layout, 64);
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_LT(delta_max_diff(got[0], want), 1e-4);
  Inputs bf16{in.q.to(at::kBFloat16), in.k.to(at::kBFloat16), in.v.to(at::kBFloat16), in.g.to(at::kBFloat16),
              in.beta.to(at::kBFloat16)};
  at::Tensor low = run(bf16, layout, 64);
  EXPECT_EQ(low.scalar_type(), at::kBFloat16);
  EXPECT_LT(delta_max_diff(low[0], want), 0.1);
}

// The model's form of the inputs, normalised by hand: q, k [B,S,Hk,Dk] divided by
// sqrt(|x|^2 + 1e-6), q by sqrt(Dk) too, each key head repeated for the H / Hk value heads
// that read it.
Inputs normalized_by_hand(const Inputs& raw, int64_t H) {
  auto unit = [](const at::Tensor& x) { return x / at::sqrt((x * x).sum(-1, true) + 1e-6); };
  const int64_t r = H / raw.q.size(2);
  return {unit(raw.q).div(std::sqrt(double(raw.q.size(3)))).repeat_interleave(r, 2),
          unit(raw.k).repeat_interleave(r, 2), raw.v, raw.g, raw.beta};
}

// d/dx of sum(o * R) for every entry of every input, autograd on the chunked rule against
// central differences of the reference, on two packed sequences that cross chunk borders.
// Chunk 3 runs the first sequence as two chunks and the second as a batch of its own; chunk
// 2 as three, so gradients flow back through states that cross more than one chunk. Each
// on the CPU kernels' packing and on ATen's, and in three forms of q, k: one per value
// head; one key head read by two value heads; and that, normalised by the rule.
enum class QkForm { kPerValueHead, kGrouped, kGroupedNormalized };
class GatedDeltaRuleChunks : public ::testing::TestWithParam<std::tuple<int64_t, bool, QkForm>> {};

TEST_P(GatedDeltaRuleChunks, GradientsMatchFiniteDifferences) {
  const int64_t chunk = std::get<0>(GetParam());
  const bool aten = std::get<1>(GetParam());
  const bool grouped = std::get<2>(GetParam()) != QkForm::kPerValueHead;
  const bool normalize = std::get<2>(GetParam()) == QkForm::kGroupedNormalized;
  std::optional<AtenOperatorsOnly> aten_only;
  if (aten) aten_only.emplace();
  at::manual_seed(4);
  const int64_t H = 2, Dk = 3, Dv = 2;
  SequenceLayout layout = layout_of({{0, 0, 0, 0, 0, -1, 1, 1}});
  Inputs in = random_inputs(1, layout.seq_len, H, Dk, Dv);
  if (grouped) {  // raw q, k of one key head
    in.q = at::randn({1, layout.seq_len, 1, Dk}, kDeltaF64Options);
    in.k = at::randn({1, layout.seq_len, 1, Dk}, kDeltaF64Options);
  }
  at::Tensor R = at::randn({1, layout.seq_len, H, Dv}, kDeltaF64Options);
  std::vector<at::Tensor*> leaves = {&in.q, &in.k, &in.v, &in.g, &in.beta};
  for (at::Tensor* t : leaves) t->requires_grad_(true);
  (gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, layout, chunk, nullptr, normalize) * R).sum().backward();

  auto loss_ref = [&](const Inputs& raw) {
    const Inputs x = normalize ? normalized_by_hand(raw, H)
                     : grouped ? Inputs{raw.q.repeat_interleave(H, 2), raw.k.repeat_interleave(H, 2), raw.v, raw.g, raw.beta}
                               : raw;
    double sum = 0;
    for (const auto& s : layout.spans)
      if (!s.padding)
        sum += (ref_span(x, 0, s.start, s.length) * R[0].narrow(0, s.start, s.length)).sum().item<double>();
    return sum;
  };
  const double eps = 1e-6;
  const char* names[] = {"q", "k", "v", "g", "beta"};
  for (size_t n = 0; n < leaves.size(); ++n) {
    at::Tensor grad = leaves[n]->grad();
    ASSERT_TRUE(grad.defined()) << names[n];
    at::Tensor flat_grad = grad.reshape(-1);
    for (int64_t i = 0; i < flat_grad.numel(); ++i) {
      Inputs plus{in.q.detach().clone(), in.k.detach().clone(), in.v.detach().clone(), in.g.detach().clone(),
                  in.beta.detach().clone()};
      Inputs minus{in.q.detach().clone(), in.k.detach().clone(), in.v.detach().clone(), in.g.detach().clone(),
                   in.beta.detach().clone()};
      at::Tensor* p[] = {&plus.q, &plus.k, &plus.v, &plus.g, &plus.beta};
      at::Tensor* m[] = {&minus.q, &minus.k, &minus.v, &minus.g, &minus.beta};
      p[n]->view(-1)[i] += eps;
      m[n]->view(-1)[i] -= eps;
      const double numeric = (loss_ref(plus) - loss_ref(minus)) / (2 * eps);
      EXPECT_NEAR(flat_grad[i].item<double>(), numeric, 1e-8) << names[n] << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GatedDeltaRule, GatedDeltaRuleChunks,
                         ::testing::Combine(::testing::Values(3, 2), ::testing::Bool(),
                                            ::testing::Values(QkForm::kPerValueHead, QkForm::kGrouped,
                                                              QkForm::kGroupedNormalized)));

// Packed rows of several sequences and padding, raw q, k of 2 key heads for 6 value heads,
// float64 and float32: the kernels' packing and ATen's against the reference, and each
// other; and every row's final state against the reference's after its last sequence.
TEST(GatedDeltaRule, NormalizedGroupedHeadsOnBothPathsMatchTheReference) {
  at::manual_seed(12);
  const int64_t Hk = 2, H = 6, Dk = 5, Dv = 3;
  SequenceLayout layout = layout_of({{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, -1, -1}, {4, 4, 4, 4, 4, 4, 4, 4, 4, -1, 6, 6},
                                     {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}});
  Inputs raw = random_inputs(layout.rows, layout.seq_len, H, Dk, Dv);
  raw.q = at::randn({layout.rows, layout.seq_len, Hk, Dk}, kDeltaF64Options) * 3;
  raw.k = at::randn({layout.rows, layout.seq_len, Hk, Dk}, kDeltaF64Options);
  const Inputs by_hand = normalized_by_hand(raw, H);
  at::Tensor outs[2], states[2];
  for (int path = 0; path < 2; ++path) {
    std::optional<AtenOperatorsOnly> aten_only;
    if (path == 1) aten_only.emplace();
    outs[path] = gated_delta_rule(raw.q, raw.k, raw.v, raw.g, raw.beta, layout, 4, &states[path], true);
    SCOPED_TRACE(path == 0 ? "kernels" : "ATen");
    expect_matches_reference(by_hand, layout, outs[path], 1e-10);
    for (const auto& s : layout.spans)
      if (s.padding) EXPECT_EQ(outs[path][s.row].narrow(0, s.start, s.length).abs().max().item<double>(), 0.0);
    EXPECT_EQ(states[path].sizes(), (std::vector<int64_t>{layout.rows, H, Dk, Dv}));
    EXPECT_EQ(states[path][2].abs().max().item<double>(), 0.0);  // a row of padding only
    const at::Tensor f32 = gated_delta_rule(raw.q.to(at::kFloat), raw.k.to(at::kFloat), raw.v.to(at::kFloat),
                                            raw.g.to(at::kFloat), raw.beta.to(at::kFloat), layout, 4, nullptr, true);
    EXPECT_EQ(f32.scalar_type(), at::kFloat);
    EXPECT_LT(delta_max_diff(f32, outs[path]), 1e-5);
  }
  EXPECT_LT(delta_max_diff(outs[0], outs[1]), 1e-12);
  EXPECT_LT(delta_max_diff(states[0], states[1]), 1e-12);
  // The final state after sequence 1 of row 0 (positions 7..9) and sequence 6 of row 1:
  // o = St^T q for a query q after the last token is the rule run one token further with
  // k = v = 0 and g = 0, beta = 0, i.e. St^T q; read through the reference by appending such
  // a token.
  auto state_times = [&](int64_t row, int64_t start, int64_t length, const at::Tensor& query) {
    auto cut = [&](const at::Tensor& t) { return t[row].narrow(0, start, length); };
    const at::Tensor q = at::cat({cut(by_hand.q), query.unsqueeze(0)}, 0);
    const at::Tensor k = at::cat({cut(by_hand.k), at::zeros({1, H, Dk}, kDeltaF64Options)}, 0);
    const at::Tensor v = at::cat({cut(by_hand.v), at::zeros({1, H, Dv}, kDeltaF64Options)}, 0);
    const at::Tensor g = at::cat({cut(by_hand.g), at::zeros({1, H}, kDeltaF64Options)}, 0);
    const at::Tensor beta = at::cat({cut(by_hand.beta), at::zeros({1, H}, kDeltaF64Options)}, 0);
    return gated_delta_rule_ref(q, k, v, g, beta)[length];  // [H, Dv]
  };
  const at::Tensor query = at::randn({H, Dk}, kDeltaF64Options);
  const int64_t last_of_row[2][2] = {{7, 3}, {10, 2}};
  for (int64_t row = 0; row < 2; ++row) {
    const at::Tensor want = state_times(row, last_of_row[row][0], last_of_row[row][1], query);
    const at::Tensor got = (states[0][row] * query.unsqueeze(-1)).sum(1);  // St^T q per head
    EXPECT_LT(delta_max_diff(got, want), 1e-10) << "row " << row;
  }
}

TEST(GatedDeltaRule, NoGradientCrossesASequenceStart) {
  at::manual_seed(5);
  SequenceLayout layout = layout_of({{0, 0, 0, 0, 0, 1, 1, 1, 1}});
  Inputs in = random_inputs(1, 9, 2, 3, 3);
  for (at::Tensor* t : {&in.q, &in.k, &in.v, &in.g, &in.beta}) t->requires_grad_(true);
  // Only the second sequence's outputs enter the loss.
  run(in, layout, 2)[0].narrow(0, 5, 4).sum().backward();
  for (at::Tensor* t : {&in.q, &in.k, &in.v, &in.g, &in.beta}) {
    EXPECT_EQ(t->grad()[0].narrow(0, 0, 5).abs().max().item<double>(), 0.0);
    EXPECT_GT(t->grad()[0].narrow(0, 5, 4).abs().max().item<double>(), 0.0);
  }
}

TEST(GatedDeltaRule, RejectsMismatchedShapes) {
  SequenceLayout layout = layout_of({{0, 0, 0, 0}});
  Inputs in = random_inputs(1, 4, 2, 3, 3);
  EXPECT_THROW(gated_delta_rule(in.q, in.k.narrow(3, 0, 2), in.v, in.g, in.beta, layout), Error);
  EXPECT_THROW(gated_delta_rule(in.q, in.k, in.v, in.g, in.beta.unsqueeze(-1), layout), Error);
  EXPECT_THROW(gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, layout_of({{0, 0, 0}})), Error);
  EXPECT_THROW(gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, layout, 0), Error);
}

TEST(CausalDepthwiseConv1d, MatchesPerPositionLoopAndRestartsAtEverySequence) {
  at::manual_seed(6);
  const int64_t C = 5, W = 4;
  SequenceLayout layout = layout_of({{0, 0, 0, 0, 0, 0, 1, 1, -1, -1, 2, 2},
                                     {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
                                     {0, -1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2}});
  at::Tensor x = at::randn({layout.rows, layout.seq_len, C}, kDeltaF64Options);
  at::Tensor w = at::randn({C, 1, W}, kDeltaF64Options);
  at::Tensor got = causal_depthwise_conv1d(x, w, layout);
  ASSERT_EQ(got.sizes(), x.sizes());
  ASSERT_TRUE(at::isfinite(got).all().item<bool>());
  for (const auto& s : layout.spans) {
    if (s.padding) continue;
    at::Tensor want = causal_depthwise_conv1d_ref(x[s.row].narrow(0, s.start, s.length), w);
    EXPECT_LT(delta_max_diff(got[s.row].narrow(0, s.start, s.length), want), 1e-14) << "row " << s.row << " at " << s.start;
  }
  // Without the restarts the second sequence of row 0 would read the first's last tokens.
  at::Tensor whole = causal_depthwise_conv1d_ref(x[0], w);
  EXPECT_GT(delta_max_diff(got[0].narrow(0, 6, 2), whole.narrow(0, 6, 2)), 1e-3);
  // Rows of one sequence each (the form that needs no masks).
  SequenceLayout plain = layout_of({{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5}});
  at::Tensor got_plain = causal_depthwise_conv1d(x.narrow(0, 0, 2), w, plain);
  for (int64_t r = 0; r < 2; ++r)
    EXPECT_LT(delta_max_diff(got_plain[r], causal_depthwise_conv1d_ref(x[r], w)), 1e-14) << "row " << r;
  // The last tap multiplies the current token: a kernel [0,0,0,1] is the identity.
  at::Tensor identity = at::zeros({C, 1, W}, kDeltaF64Options);
  identity.select(2, W - 1).fill_(1.0);
  EXPECT_LT(delta_max_diff(causal_depthwise_conv1d(x, identity, layout), x), 1e-15);
}

// Packed sequences with padding (masked reads), and rows of one sequence each.
class CausalDepthwiseConv1dLayouts : public ::testing::TestWithParam<std::vector<std::vector<int64_t>>> {};

TEST_P(CausalDepthwiseConv1dLayouts, GradientsMatchFiniteDifferencesAndDtypeIsKept) {
  for (bool silu : {false, true}) {
    SCOPED_TRACE(silu ? "with the SiLU" : "the convolution alone");
    at::manual_seed(7);
    const int64_t C = 3, W = 3;
    SequenceLayout layout = layout_of(GetParam());
    at::Tensor x = at::randn({layout.rows, layout.seq_len, C}, kDeltaF64Options).requires_grad_(true);
    at::Tensor w = at::randn({C, 1, W}, kDeltaF64Options).requires_grad_(true);
    at::Tensor R = at::randn({layout.rows, layout.seq_len, C}, kDeltaF64Options);
    (causal_depthwise_conv1d(x, w, layout, silu) * R).sum().backward();
    auto loss = [&](const at::Tensor& xs, const at::Tensor& ws) {
      return (causal_depthwise_conv1d(xs, ws, layout, silu) * R).sum().item<double>();
    };
    const double eps = 1e-6;
    for (int64_t i = 0; i < x.numel(); ++i) {
      at::Tensor p = x.detach().clone(), m = x.detach().clone();
      p.view(-1)[i] += eps;
      m.view(-1)[i] -= eps;
      EXPECT_NEAR(x.grad().view(-1)[i].item<double>(), (loss(p, w.detach()) - loss(m, w.detach())) / (2 * eps), 1e-8);
    }
    for (int64_t i = 0; i < w.numel(); ++i) {
      at::Tensor p = w.detach().clone(), m = w.detach().clone();
      p.view(-1)[i] += eps;
      m.view(-1)[i] -= eps;
      EXPECT_NEAR(w.grad().view(-1)[i].item<double>(), (loss(x.detach(), p) - loss(x.detach(), m)) / (2 * eps), 1e-8);
    }
    at::Tensor low = causal_depthwise_conv1d(x.detach().to(at::kBFloat16), w.detach(), layout, silu);
    EXPECT_EQ(low.scalar_type(), at::kBFloat16);
  }
}

INSTANTIATE_TEST_SUITE_P(CausalDepthwiseConv1d, CausalDepthwiseConv1dLayouts,
                         ::testing::Values(std::vector<std::vector<int64_t>>{{0, 0, 0, 1, 1, -1}},
                                           std::vector<std::vector<int64_t>>{{0, 0, 0, 0, 0}, {4, 4, 4, 4, 4}}));

// With the SiLU: the value is silu of the per-span reference; float32 (the one-pass CPU
// loops) agrees with float64 within float32's rounding, forward and backward; bf16 rounds
// the convolution before its SiLU, as the layer would; and the kernel's gradient is the
// same sum whatever the thread count (fixed blocks of rows, added in order).
TEST(CausalDepthwiseConv1d, WithSiluFloat32AndBf16AndAnyThreadCount) {
  at::manual_seed(8);
  const int64_t C = 37, W = 4;
  // 3 rows of 60 tokens (more than one block of rows), packed with padding.
  std::vector<int64_t> packed(60, 0), plain(60, 0);
  for (int64_t t = 0; t < 60; ++t) packed[t] = t < 25 ? 0 : t < 27 ? -1 : t < 50 ? 1 : 2;
  SequenceLayout layout = layout_of({packed, plain, packed});
  at::Tensor x = at::randn({layout.rows, layout.seq_len, C}, kDeltaF64Options);
  at::Tensor w = at::randn({C, 1, W}, kDeltaF64Options) * 0.5;
  at::Tensor got = causal_depthwise_conv1d(x, w, layout, /*silu=*/true);
  for (const auto& s : layout.spans) {
    if (s.padding) continue;
    at::Tensor want = at::silu(causal_depthwise_conv1d_ref(x[s.row].narrow(0, s.start, s.length), w));
    EXPECT_LT(delta_max_diff(got[s.row].narrow(0, s.start, s.length), want), 1e-14) << "row " << s.row << " at " << s.start;
  }

  // float32 against float64: values, and the gradients of x and w.
  at::Tensor R = at::randn(x.sizes(), kDeltaF64Options);
  auto grads = [&](c10::ScalarType dtype) {
    at::Tensor xs = x.to(dtype).detach().requires_grad_(true), ws = w.to(dtype).detach().requires_grad_(true);
    at::Tensor out = causal_depthwise_conv1d(xs, ws, layout, true);
    (out * R.to(dtype)).sum().backward();
    return std::array<at::Tensor, 3>{out.detach().to(at::kDouble), xs.grad().to(at::kDouble), ws.grad().to(at::kDouble)};
  };
  const auto f64 = grads(at::kDouble), f32 = grads(at::kFloat);
  for (int i = 0; i < 3; ++i)
    EXPECT_LT(delta_max_diff(f32[i], f64[i]) / f64[i].abs().max().item<double>(), 1e-5) << "output / dx / dw " << i;

  // bf16: the convolution (computed in float32) rounded to bf16, then the SiLU in bf16.
  at::Tensor xb = x.to(at::kBFloat16);
  at::Tensor want_b = at::silu(causal_depthwise_conv1d(xb, w.to(at::kBFloat16), layout));
  EXPECT_TRUE(at::equal(causal_depthwise_conv1d(xb, w.to(at::kBFloat16), layout, true), want_b));

  // One thread and two: the same sums, bit for bit.
  const auto one = with_aten_threads(1, [&] { return grads(at::kFloat); });
  const auto two = with_aten_threads(2, [&] { return grads(at::kFloat); });
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(at::equal(one[i], two[i])) << "output / dx / dw " << i;
}

}  // namespace
}  // namespace glint
