// Multi-tenant LoRA in one process: a mixed batch gives each tenant's rows exactly the
// outputs and gradients of that tenant's adapter applied alone (the single-adapter
// path on a separate copy of the model), base-only rows the base model's outputs.
#include <gtest/gtest.h>
#include <ATen/core/grad_mode.h>

#include "lora/lora_test_util.h"
#include "lora/tenants.h"
#include "model/causal_lm.h"
#include "model/family.h"
#include "model_util.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::kF32;

// 4 sequences of 5 tokens (ids < 21).
at::Tensor batch_ids() {
  return at::tensor({1, 4, 9, 16, 20, 0, 7, 3, 3, 2, 5, 5, 6, 11, 19, 12, 8, 13, 14, 1}, at::kLong).view({4, 5});
}

// Per-row summed cross-entropy of next-token prediction: [B].
at::Tensor row_losses(CausalLMImpl& m, const at::Tensor& ids) {
  at::Tensor pos = at::arange(ids.size(1), at::kLong).repeat({ids.size(0), 1});
  at::Tensor seg = at::zeros_like(ids);
  at::Tensor hidden = m.forward(ids, pos, seg).hidden;
  return token_cross_entropy(m, hidden, ids).sum(1);
}

// Random B matrices, so that every adapter changes the outputs.
void randomize(LoraModel& lora, uint64_t seed) {
  at::NoGradGuard ng;
  at::Generator g = at::detail::createCPUGenerator(seed);
  for (auto& site : lora.sites) site.B().normal_(0, 0.5, g);
}

TenantOptions tenant(const std::string& name, int64_t r, double alpha, const std::string& targets, uint64_t seed,
                     bool rslora = false) {
  TenantOptions t;
  t.name = name;
  t.lora.r = r;
  t.lora.alpha = alpha;
  t.lora.use_rslora = rslora;
  LoraOptions::parse_targets(targets, "targets", &t.lora);
  t.seed = seed;
  return t;
}

// Tenant a (slot 0) and b (slot 1) on the rows `slots` of the batch `ids` (-1: base only).
// float32 agrees to its noise; float64 (place) to rounding.
void check_mixed(const std::vector<int64_t>& slots, const std::string& b_targets,
                 const ModelConfig& c = testing::lora_test_config(), const at::Tensor& ids = batch_ids(),
                 const TensorPlacement& place = kF32) {
  const double tol = place.dtype == at::kDouble ? 1e-10 : 1e-5;
  CausalLM shared(c, place);
  init_weights(*shared, 5);
  TenantBank bank(*shared, /*slots=*/3, /*r_max=*/4);
  TenantOptions a = tenant("a", 2, 4.0, "all", 11);
  TenantOptions b = tenant("b", 4, 8.0, b_targets, 12, true);
  ASSERT_EQ(bank.add(a), 0);
  ASSERT_EQ(bank.add(b), 1);
  randomize(bank.adapter(0), 100);
  randomize(bank.adapter(1), 200);
  bank.set_rows(at::tensor(slots, at::kLong));
  at::Tensor losses = row_losses(*shared, ids);  // [4]
  // Each tenant's loss normalised by its own rows.
  std::vector<std::vector<int64_t>> rows_of(2);
  std::vector<int64_t> base_rows;
  for (int64_t i = 0; i < int64_t(slots.size()); ++i)
    (slots[i] < 0 ? base_rows : rows_of[slots[i]]).push_back(i);
  at::Tensor objective = at::zeros({}, losses.options());
  for (int k = 0; k < 2; ++k)
    for (int64_t i : rows_of[k]) objective = objective + losses[i] / double(rows_of[k].size());
  objective.backward();

  for (int k = 0; k < 2; ++k) {
    const TenantOptions& t = k == 0 ? a : b;
    const std::vector<int64_t>& rows = rows_of[k];
    CausalLM alone(c, place);
    init_weights(*alone, 5);
    LoraModel lora = apply_lora(*alone, t.lora, t.seed);
    // Same initialisation as the bank's adapter, then the same B.
    auto want = lora.named_parameters(), got = bank.adapter(k).named_parameters();
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(want[i].first, got[i].first);
      if (want[i].first.size() > 6 && want[i].first.substr(want[i].first.size() - 6) == "lora_A")
        EXPECT_TRUE(at::equal(want[i].second, got[i].second)) << want[i].first;
      at::NoGradGuard ng;
      want[i].second.copy_(got[i].second);
    }
    at::Tensor idx = at::tensor(rows, at::kLong);
    at::Tensor alone_losses = row_losses(*alone, ids.index_select(0, idx));
    EXPECT_TRUE(at::allclose(alone_losses, losses.detach().index_select(0, idx), tol, tol / 10))
        << t.name << ": " << alone_losses << " vs " << losses.detach().index_select(0, idx);
    (alone_losses.sum() / double(rows.size())).backward();
    for (size_t i = 0; i < want.size(); ++i) {
      const at::Tensor& g_alone = want[i].second.grad();
      const at::Tensor& g_mixed = got[i].second.grad();
      // An adapter on a selection-only projection (DeepSeek-V4's indexer) gets none either way.
      ASSERT_EQ(g_alone.defined(), g_mixed.defined()) << want[i].first;
      if (!g_alone.defined()) continue;
      double err = (g_alone - g_mixed).norm().item<double>() / std::max(1e-12, g_alone.norm().item<double>());
      EXPECT_LT(err, tol) << t.name << " " << want[i].first;
    }
  }
  // Base-only rows are the base model's.
  if (base_rows.empty()) return;
  CausalLM base(c, place);
  init_weights(*base, 5);
  at::NoGradGuard ng;
  at::Tensor idx = at::tensor(base_rows, at::kLong);
  EXPECT_TRUE(at::allclose(row_losses(*base, ids.index_select(0, idx)), losses.detach().index_select(0, idx), tol, tol / 10));
}

// Rows in any order, with a base-only row; then even runs of slots, where the
// projections both tenants adapt run as batched GEMMs over the slots.
TEST(Tenants, MixedBatchEqualsEachTenantAlone) { check_mixed({0, 1, -1, 0}, "q_proj,v_proj,experts.down_proj"); }
TEST(Tenants, EvenRunsOfSlotsEqualEachTenantAlone) {
  check_mixed({0, 0, 1, 1}, "q_proj,v_proj,experts.down_proj");
  check_mixed({1, 1, 0, 0}, "all");
}

// Every family's adaptable modules (latent and grouped attention, DeltaNet, compressors,
// shared experts) route each row to its tenant's adapter.
TEST(Tenants, EveryFamilyMixedBatchEqualsEachTenantAlone) {
  at::Generator g = at::detail::createCPUGenerator(3);
  at::Tensor ids = at::randint(0, 21, {4, 17}, g, at::kLong);  // long enough for compressor windows
  for (const ModelFamily* f : model_families()) {
    SCOPED_TRACE(f->name());
    const TensorPlacement f64{at::kDouble, c10::Device(c10::kCPU)};
    check_mixed({0, 1, -1, 0}, "all", f->tiny(21), ids, f64);
    check_mixed({1, 1, 0, 0}, "all", f->tiny(21), ids, f64);
  }
}

TEST(Tenants, ATenantWithoutRowsGetsNoGradient) {
  ModelConfig c = testing::lora_test_config();
  CausalLM m(c, kF32);
  init_weights(*m, 5);
  TenantBank bank(*m, 2, 4);
  bank.add(tenant("a", 2, 4.0, "all", 1));
  bank.add(tenant("b", 2, 4.0, "all", 2));
  randomize(bank.adapter(0), 3);
  randomize(bank.adapter(1), 4);
  bank.set_rows(at::tensor({0, 0, -1, 0}, at::kLong));
  row_losses(*m, batch_ids()).sum().backward();
  for (auto& [name, t] : bank.adapter(1).named_parameters())
    EXPECT_FALSE(t.grad().defined() && t.grad().abs().sum().item<double>() != 0) << name;
  // Tenant a, on three rows, gets a gradient on every one of its tensors.
  for (auto& [name, t] : bank.adapter(0).named_parameters())
    EXPECT_TRUE(t.grad().defined() && t.grad().abs().sum().item<double>() > 0) << name;
}

TEST(Tenants, RegistryAddRemoveAndErrors) {
  ModelConfig c = testing::lora_test_config();
  CausalLM m(c, kF32);
  init_weights(*m, 5);
  TenantBank bank(*m, 2, 4);
  TenantOptions a = tenant("a", 2, 4.0, "all", 1);
  bank.add(a);
  std::vector<at::Tensor> first;
  for (auto& [name, t] : bank.adapter(0).named_parameters()) first.push_back(t.detach().clone());
  randomize(bank.adapter(0), 9);  // as if trained
  bank.add(tenant("b", 4, 4.0, "all", 2));
  EXPECT_EQ(bank.list(), (std::vector<std::string>{"a", "b"}));
  auto err = [&](const std::function<void()>& f) { return testing::error_message(f); };
  EXPECT_NE(err([&] { bank.add(tenant("c", 2, 4.0, "all", 3)); }).find("all 2 slots are taken"), std::string::npos);
  EXPECT_NE(err([&] { bank.add(tenant("a", 2, 4.0, "all", 3)); }).find("exists already"), std::string::npos);
  EXPECT_NE(err([&] { bank.remove("zzz"); }).find("no tenant 'zzz'"), std::string::npos);
  bank.remove("a");
  EXPECT_EQ(bank.list(), (std::vector<std::string>{"", "b"}));
  EXPECT_NE(err([&] { bank.add(tenant("big", 8, 4.0, "all", 3)); }).find("r = 8 exceeds the bank's r_max = 4"),
            std::string::npos);
  EXPECT_NE(err([&] { bank.add(tenant("no/slash", 2, 4.0, "all", 3)); }).find("must be letters"), std::string::npos);
  // Re-added: a fresh adapter (the initial A, B zeros), not the trained one.
  EXPECT_EQ(bank.add(a), 0);
  auto again = bank.adapter(0).named_parameters();
  ASSERT_EQ(again.size(), first.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(at::equal(again[i].second, first[i])) << again[i].first;
  EXPECT_NE(err([&] { bank.set_rows(at::tensor({0, 2}, at::kLong)); }).find("outside [-1, 2)"), std::string::npos);
}

}  // namespace
}  // namespace glint
