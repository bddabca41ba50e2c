// The op-level profile: operators counted in the phase and region the code named, a
// backward node credited to the region whose forward made it, self times adding up to
// the phase, nothing counted outside start/stop or on other threads.
#include "core/op_profile.h"
#include "core/error.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/custom_function.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <thread>

namespace glint {
namespace {

// The phase `name` of a report, or null.
const nlohmann::json* phase_of(const nlohmann::json& report, const std::string& name) {
  for (const auto& p : report["phases"])
    if (p["phase"] == name) return &p;
  return nullptr;
}

// Calls per step of the ops of `phase` whose name contains `op` and whose region is `region`.
double calls_of(const nlohmann::json& phase, const std::string& op, const std::string& region) {
  double calls = 0;
  for (const auto& o : phase["ops"])
    if (o["op"].get<std::string>().find(op) != std::string::npos && o["region"] == region)
      calls += o["calls"].get<double>();
  return calls;
}

TEST(OpProfile, OpsCountInTheirPhaseAndRegionAndABackwardNodeInItsForwardsRegion) {
  at::Tensor w = at::randn({8, 8}, at::kDouble).requires_grad_();
  at::Tensor x = at::randn({4, 8}, at::kDouble);
  profile::Profiler p;
  EXPECT_FALSE(profile::active());
  for (int step = 0; step < 2; ++step) {
    p.start();
    EXPECT_TRUE(profile::active());
    at::Tensor loss, kept;
    {
      profile::Phase forward("forward");
      at::Tensor h;
      {
        profile::Scope a("a");
        h = at::mm(at::mm(x, w), w);
        kept = at::zeros({1 << 20}, at::kDouble);  // 8 MiB live until after the backward
      }
      profile::Scope b("b");
      loss = at::tanh(h).sum();
    }
    // Another thread's work is not this profile's.
    std::thread([] { at::mm(at::ones({3, 3}), at::ones({3, 3})); }).join();
    {
      profile::Phase backward("backward");
      loss.backward();
    }
    kept = at::Tensor();
    p.stop();
    p.note_step();
    EXPECT_FALSE(profile::active());
  }
  at::mm(x, x.t());  // after stop: not counted
  const nlohmann::json r = p.report(1000);
  EXPECT_EQ(r["steps"], 2);
  const nlohmann::json* fwd = phase_of(r, "forward");
  const nlohmann::json* bwd = phase_of(r, "backward");
  ASSERT_TRUE(fwd && bwd) << r.dump(1);
  EXPECT_EQ(calls_of(*fwd, "aten::mm", "a"), 2) << fwd->dump(1);
  EXPECT_EQ(calls_of(*fwd, "aten::mm", "b"), 0);
  EXPECT_EQ(calls_of(*fwd, "aten::tanh", "b"), 1);
  EXPECT_GE(calls_of(*fwd, "aten::sum", "b"), 1);  // some builds dispatch sum to a second sum
  EXPECT_EQ(calls_of(*fwd, "aten::sum", "a"), 0);
  // Backward nodes in the forward's regions; their own ops inside them.
  EXPECT_EQ(calls_of(*bwd, "MmBackward", "a"), 2) << bwd->dump(1);
  EXPECT_EQ(calls_of(*bwd, "TanhBackward", "b"), 1);
  EXPECT_EQ(calls_of(*bwd, "SumBackward", "b"), 1);
  EXPECT_EQ(calls_of(*bwd, "MmBackward", "b"), 0);
  EXPECT_GE(calls_of(*bwd, "aten::mm", "a"), 3);  // the gradients of both products
  EXPECT_EQ(calls_of(*bwd, "aten::mm", "b"), 0);
  // Self times add up to each phase's time; regions likewise.
  for (const nlohmann::json* ph : {fwd, bwd}) {
    double ops = 0, regions = 0;
    for (const auto& o : (*ph)["ops"]) ops += o["seconds"].get<double>();
    for (const auto& g : (*ph)["regions"]) regions += g["seconds"].get<double>();
    const double total = (*ph)["seconds"].get<double>();
    EXPECT_GT(total, 0);
    EXPECT_NEAR(ops, total, 1e-9 * total) << ph->dump(1);
    EXPECT_NEAR(regions, total, 1e-9 * total);
  }
  EXPECT_NE(p.text().find("aten::mm [a]"), std::string::npos) << p.text();
  // The 8 MiB block is live at the peak, under the phase and region that allocated it.
  const nlohmann::json& m = r["memory"];
  EXPECT_GE(m["peak_over_step_start_mb"].get<double>(), 8.0) << m.dump(1);
  double in_a = 0;
  for (const auto& g : m["live_at_peak"])
    if (g["phase"] == "forward" && g["region"] == "a") in_a += g["mb"].get<double>();
  EXPECT_GE(in_a, 8.0) << m.dump(1);
  EXPECT_LT(in_a, 8.1) << m.dump(1);
}

// A custom autograd function: y = 2 x, with no operator of its own in the forward that
// autograd would see.
struct Twice : torch::autograd::Function<Twice> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x) { return x * 2; }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list g) {
    return {g[0] * 2};
  }
};

TEST(OpProfile, ACustomFunctionMadeFirstInARegionCountsInThatRegion) {
  at::Tensor w = at::randn({8, 8}, at::kDouble).requires_grad_();
  at::Tensor x = at::randn({4, 8}, at::kDouble);
  profile::Profiler p;
  p.start();
  at::Tensor loss;
  {
    profile::Phase forward("forward");
    at::Tensor h;
    {
      profile::Scope a("a");
      h = at::mm(x, w);
    }
    {
      profile::Scope c("c");
      h = Twice::apply(h);  // the first thing in "c": no operator announces "c" before it
    }
    h = Twice::apply(h);  // after "c" closed: outside every region
    loss = h.sum();
  }
  {
    profile::Phase backward("backward");
    loss.backward();
  }
  p.stop();
  p.note_step();
  const nlohmann::json r = p.report(1000);
  const nlohmann::json* bwd = phase_of(r, "backward");
  ASSERT_TRUE(bwd) << r.dump(1);
  // The node itself (not the engine's evaluate_function wrapper around it, which has no region).
  auto node_calls = [&](const std::string& region) {
    double calls = 0;
    for (const auto& o : (*bwd)["ops"])
      if (o["op"].get<std::string>().rfind("torch::autograd::CppNode<", 0) == 0 && o["region"] == region)
        calls += o["calls"].get<double>();
    return calls;
  };
  EXPECT_EQ(node_calls("c"), 1) << bwd->dump(1);
  EXPECT_EQ(node_calls("a"), 0);
  EXPECT_EQ(node_calls("(other)"), 1);
  EXPECT_EQ(calls_of(*bwd, "MmBackward", "a"), 1);
}

TEST(OpProfile, OneProfileAtATime) {
  profile::Profiler a, b;
  a.start();
  EXPECT_THROW(b.start(), Error);
  a.stop();
  b.start();
  EXPECT_TRUE(profile::active());
  b.stop();
  // Scopes with no profile running cost nothing and record nothing.
  profile::Scope s("nothing");
  EXPECT_EQ(b.report()["phases"].size(), 0u);
}

}  // namespace
}  // namespace glint
