// A W-rank data-parallel run equals the 1-rank run on the same global batch: the loss,
// router loss and gradient norm of every step, and every trained tensor at the end.
// Real processes through `glint launch`, float64, gradient accumulation.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/family.h"
#include "test_util.h"
#include "tiny_run.h"

namespace {

using glint::testing::run_command;

std::vector<nlohmann::json> read_metrics(const std::string& path) { return glint::testing::read_jsonl(path); }

// Routing made uneven on purpose: hidden dimension 0 of every token embedding is large,
// and the router rows of experts 6 and 7 of the first MoE layer weigh it negatively (and
// their correction biases, where the router has them, are negative), so these two
// experts receive few or no tokens (in every step, some expert gets none on any rank).
void make_routing_uneven(const std::string& file, const std::string& router) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  {
    glint::SafetensorsFile f(file);
    for (const auto& k : f.keys()) tensors.emplace_back(k, f.read(k));
  }
  for (auto& [k, t] : tensors) {
    if (k == "model.embed_tokens.weight") t.select(1, 0).fill_(1.0);
    if (k == router) t.narrow(0, 6, 2).select(1, 0).fill_(-4.0);
    // Sigmoid routing (DeepSeek-V3): the correction bias keeps them out of the choice.
    if (k == router.substr(0, router.size() - 6) + "e_score_correction_bias") t.narrow(0, 6, 2).fill_(-1.0);
  }
  glint::write_safetensors(file, tensors);
}

// Relative differences of metrics: values below 1e-12 count as that size.
double metric_rel(double a, double b) { return glint::testing::rel(a, b, 1e-12); }

struct DataParallelVariant {
  bool full;
  std::vector<std::pair<int, std::string>> runs;  // ranks and parallel flags of each multi-rank run
  std::string name;
  std::string dtype = "float64";
  // Relative agreement with the 1-rank run: losses, gradient norms and final weights;
  // each step's gradients (norm of the difference over the norm).
  double tol = 1e-9, grad_tol = 1e-9;
  double weight_tol = -1;  // the trained weights; -1: tol
  std::string model_type = "qwen3_moe";
  nlohmann::json config;  // the model's config.json; null: the one written below for model_type
  friend void PrintTo(const DataParallelVariant& v, std::ostream* os) { *os << v.name; }
};

class DataParallel : public ::testing::TestWithParam<DataParallelVariant> {};

TEST_P(DataParallel, RanksMatchTheSingleProcessRun) {
  const bool full = GetParam().full;
  std::string dir = glint::testing::fresh_temp_dir("dp_" + GetParam().name);
  // A Qwen3-MoE model with the router load-balancing loss on, or a DeepSeek-V3 one (MLA,
  // group-limited sigmoid routing, shared experts, a dense first layer).
  const bool v3 = GetParam().model_type == "deepseek_v3";
  nlohmann::json v3_cfg = {{"model_type", "deepseek_v3"}, {"vocab_size", 16}, {"hidden_size", 32},
                           {"intermediate_size", 48},      {"moe_intermediate_size", 16},
                           {"num_hidden_layers", 2},       {"num_attention_heads", 4},
                           {"n_routed_experts", 8},        {"num_experts_per_tok", 2},
                           {"n_shared_experts", 1},        {"n_group", 4},
                           {"topk_group", 2},              {"first_k_dense_replace", 1},
                           {"q_lora_rank", 16},            {"kv_lora_rank", 8},
                           {"qk_nope_head_dim", 8},        {"qk_rope_head_dim", 4},
                           {"v_head_dim", 6},              {"initializer_range", 0.1}};
  // Qwen3.5-MoE: Gated DeltaNet and gated attention layers, a gated shared expert.
  nlohmann::json q35_cfg = {{"model_type", "qwen3_5_moe_text"}, {"vocab_size", 16}, {"hidden_size", 32},
                            {"num_hidden_layers", 2},   {"layer_types", {"linear_attention", "full_attention"}},
                            {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                            {"head_dim", 8},            {"linear_num_key_heads", 2},
                            {"linear_num_value_heads", 4}, {"linear_key_head_dim", 8},
                            {"linear_value_head_dim", 6}, {"linear_conv_kernel_dim", 4},
                            {"num_experts", 8},         {"num_experts_per_tok", 2},
                            {"moe_intermediate_size", 16}, {"shared_expert_intermediate_size", 16},
                            {"output_router_logits", true}, {"router_aux_loss_coef", 0.02},
                            {"initializer_range", 0.1}};
  const bool q35 = GetParam().model_type == "qwen3_5_moe_text";
  // DeepSeek-V4: hyper-connections, sliding / compressed sparse / heavily compressed
  // attention, a hash-routed first layer, sqrt(softplus) routing with correction biases.
  nlohmann::json v4_cfg = {{"model_type", "deepseek_v4"}, {"vocab_size", 16}, {"hidden_size", 32},
                           {"num_hidden_layers", 3},      {"num_attention_heads", 4},
                           {"num_key_value_heads", 1},    {"head_dim", 8},
                           {"qk_rope_head_dim", 4},       {"q_lora_rank", 16},
                           {"o_groups", 2},               {"o_lora_rank", 8},
                           {"n_routed_experts", 8},       {"num_experts_per_tok", 2},
                           {"moe_intermediate_size", 16}, {"num_hash_layers", 1},
                           {"layer_types", {"sliding_attention", "compressed_sparse_attention",
                                            "heavily_compressed_attention"}},
                           {"compress_rates", {{"compressed_sparse_attention", 2}, {"heavily_compressed_attention", 4}}},
                           {"sliding_window", 4},         {"index_n_heads", 2},
                           {"index_head_dim", 4},         {"index_topk", 2},
                           {"hc_mult", 2},                {"hc_sinkhorn_iters", 3},
                           {"initializer_range", 0.1}};
  const bool v4 = GetParam().model_type == "deepseek_v4";
  // Qwen3-Next: fused DeltaNet projections, per-expert keys on disk, a dense second layer,
  // router weights not renormalised.
  nlohmann::json qnext_cfg = q35_cfg;
  qnext_cfg["model_type"] = "qwen3_next";
  qnext_cfg["intermediate_size"] = 40;
  qnext_cfg["mlp_only_layers"] = {1};
  qnext_cfg["norm_topk_prob"] = false;
  const bool qnext = GetParam().model_type == "qwen3_next";
  nlohmann::json cfg = !GetParam().config.is_null() ? GetParam().config : v3 ? v3_cfg : q35 ? q35_cfg : v4 ? v4_cfg : qnext ? qnext_cfg : nlohmann::json{{"model_type", "qwen3_moe"}, {"vocab_size", 16}, {"hidden_size", 32},
                        {"intermediate_size", 48},   {"moe_intermediate_size", 16},
                        {"num_hidden_layers", 2},    {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},  {"head_dim", 8},
                        {"num_experts", 8},          {"num_experts_per_tok", 2},
                        {"mlp_only_layers", {1}},    {"output_router_logits", true},
                        {"router_aux_loss_coef", 0.02}, {"initializer_range", 0.1}};
  // The first MoE layer that routes by its router (not by a token-id table).
  const glint::ModelConfig model_config = glint::ModelConfig::from_json(cfg, "test config");
  int64_t routed = 0;
  while (!model_config.is_moe_layer(routed) ||
         (!model_config.mlp_layer_types.empty() && model_config.mlp_layer_types.at(size_t(routed)) == "hash_moe"))
    ++routed;
  const std::string router = "model.layers." + std::to_string(routed) + ".mlp.gate.weight";
  std::ofstream(dir + "/config.json") << cfg.dump();
  int code;
  std::string out = run_command(std::string(GLINT_BINARY) + " init-model --config " + dir + "/config.json --output " +
                            dir + "/model --seed 3",
                        &code);
  ASSERT_EQ(code, 0) << out;
  make_routing_uneven(dir + "/model/model.safetensors", router);
  std::string train = std::string(GLINT_BINARY) + " train --model " + dir +
                      "/model --steps 3 --batch-size 8 --micro-batch-size 1 --lr 1e-2 --seed 5 --dtype " +
                      GetParam().dtype + " --max-grad-norm 0.5 --warmup-steps 1" + (full ? " --full" : " --lora-r 4") +
                      " --output ";
  // float64: a mesh changes only the order of additions, so every number must agree to
  // rounding (1e-9 relative). In float32 the same runs differ by up to ~4e-5 in the
  // small q/k LoRA gradients under q/k norm, noise that hides real differences.
  // No --data: the built-in task's samples (this model's vocabulary holds its 16 ids).
  std::string base_dir = dir + "/w1";
  out = run_command(train + base_dir + " --eval-samples 0 --dump-gradients " + base_dir + "/grads", &code);
  ASSERT_EQ(code, 0) << out;
  auto base = read_metrics(base_dir + "/metrics.jsonl");
  ASSERT_EQ(base.size(), 3u);
  std::string weights = full ? "/model/model.safetensors" : "/adapter/adapter_model.safetensors";
  glint::SafetensorsFile base_w(base_dir + weights);
  // Every step has experts without a single token (so some EP ranks receive none for them).
  for (int s = 0; s < 3; ++s) EXPECT_GE(base[s]["idle_experts"].get<int>(), 1) << "step " << s;
  const double tol = GetParam().tol, grad_tol = GetParam().grad_tol;
  const bool exact = GetParam().dtype == "float64";
  const bool per_tensor = GetParam().dtype != "bfloat16";
  const double weight_tol = GetParam().weight_tol > 0 ? GetParam().weight_tol : tol;
  double worst_metric = 0, worst_grad = 0, worst_weight = 0;  // printed: the measured gaps
  int index = 0;
  for (const auto& [w, flags] : GetParam().runs) {
    std::string run_dir = dir + "/run" + std::to_string(index++);
    SCOPED_TRACE("W=" + std::to_string(w) + " " + flags);
    // A short distributed timeout turns a collective mismatch into a failure, not a hang.
    out = run_command("GLINT_DIST_TIMEOUT_SECONDS=60 " + std::string(GLINT_BINARY) + " launch -n " + std::to_string(w) + " -- " + train + run_dir + " " +
                  flags + " --eval-samples 0 --dump-gradients " + run_dir + "/grads",
              &code);
    ASSERT_EQ(code, 0) << out;
    auto m = read_metrics(run_dir + "/metrics.jsonl");
    ASSERT_EQ(m.size(), 3u);
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(m[s]["label_tokens"], base[s]["label_tokens"]) << "step " << s;
      // In float64 the routing is the same; in narrower types a near-tie may flip.
      if (exact) EXPECT_EQ(m[s]["idle_experts"], base[s]["idle_experts"]) << "step " << s;
      for (const char* k : {"loss", "aux_loss", "grad_norm"}) {
        if (!base[s].contains(k)) continue;  // no load-balancing loss (DeepSeek-V3)
        worst_metric = std::max(worst_metric, metric_rel(m[s][k].get<double>(), base[s][k].get<double>()));
        EXPECT_LT(metric_rel(m[s][k].get<double>(), base[s][k].get<double>()), tol)
            << k << " step " << s << ": " << m[s][k] << " vs " << base[s][k];
      }
    }
    // Every gradient of every step, gathered to full tensors (rank 0 writes them). In
    // float64 and float32 each tensor agrees; in bf16 the set of them does (a small
    // tensor's own relative error is then dominated by rounding).
    for (int s = 1; s <= 3; ++s) {
      std::string f = "/grads/step_" + std::to_string(s) + ".safetensors";
      glint::SafetensorsFile want(base_dir + f), got(run_dir + f);
      ASSERT_EQ(got.keys(), want.keys()) << f;
      ASSERT_FALSE(want.keys().empty());
      double diff2 = 0, norm2 = 0;
      for (const auto& k : want.keys()) {
        at::Tensor a = want.read(k).to(at::kDouble), b = got.read(k).to(at::kDouble);
        ASSERT_EQ(a.sizes(), b.sizes()) << k;
        diff2 += (a - b).pow(2).sum().item<double>();
        norm2 += a.pow(2).sum().item<double>();
        if (!per_tensor) continue;
        double err = (a - b).norm().item<double>() / std::max(1e-12, a.norm().item<double>());
        worst_grad = std::max(worst_grad, err);
        EXPECT_LT(err, grad_tol) << "gradient " << k << " step " << s;
      }
      if (per_tensor) continue;
      double err = std::sqrt(diff2 / std::max(1e-24, norm2));
      worst_grad = std::max(worst_grad, err);
      EXPECT_LT(err, grad_tol) << "gradients of step " << s;
    }
    // FSDP and EP: each rank holds a smaller share of the weights (and optimizer state);
    // replicated placements hold the same amount everywhere.
    double mb = m[0]["weights_mb"].get<double>(), base_mb = base[0]["weights_mb"].get<double>();
    bool fsdp = flags.find("--fsdp") != std::string::npos, ep = flags.find("--ep") != std::string::npos;
    if (fsdp && full) EXPECT_LT(mb, base_mb * (w == 2 ? 0.7 : 0.5));  // weights + moments
    else if (fsdp || ep) EXPECT_LT(mb, base_mb);
    else EXPECT_DOUBLE_EQ(mb, base_mb);
    // Clipping was active (so the norm itself is under test).
    EXPECT_GT(base[0]["grad_norm"].get<double>(), 0.5);
    glint::SafetensorsFile got(run_dir + weights);
    ASSERT_EQ(got.keys(), base_w.keys());
    double diff2 = 0, norm2 = 0;
    for (const auto& k : base_w.keys()) {
      at::Tensor a = base_w.read(k).to(at::kDouble), b = got.read(k).to(at::kDouble);
      diff2 += (a - b).pow(2).sum().item<double>();
      norm2 += a.pow(2).sum().item<double>();
      if (!per_tensor) continue;
      // Relative error of the tensor: ||a - b|| / ||a||.
      double err = (a - b).norm().item<double>() / std::max(1e-12, a.norm().item<double>());
      worst_weight = std::max(worst_weight, err);
      EXPECT_LT(err, weight_tol) << k;
    }
    if (!per_tensor) {
      worst_weight = std::sqrt(diff2 / std::max(1e-24, norm2));
      EXPECT_LT(worst_weight, weight_tol) << "trained weights";
    }
    std::printf("W=%d %s %s: largest relative differences: metrics %.2e, gradients %.2e, weights %.2e\n", w,
                flags.c_str(), GetParam().dtype.c_str(), worst_metric, worst_grad, worst_weight);
  }
}

// Data parallel (DDP), FSDP, activation checkpointing, and expert parallelism: ep = W,
// ep < W with the experts replicated (ep_fsdp copies, gradients all-reduced) or sharded
// over ep_fsdp (--fsdp), in both EP layouts. FSDP both ways: blocking (the CPU's
// default) and with prefetch and asynchronous reduce-scatter (--fsdp-overlap on).
std::vector<std::pair<int, std::string>> on_2_and_4(const std::string& flags) {
  return {{2, flags}, {4, flags}};
}
const std::vector<std::pair<int, std::string>> kEpMeshes = {{2, "--fsdp --ep 2"},
                                                             {4, "--fsdp --ep 4"},
                                                             {4, "--fsdp --ep 2"},
                                                             {4, "--fsdp --ep 2 --ep-layout strided --fsdp-overlap on"}};
const std::vector<std::pair<int, std::string>> kEp2Fsdp4 = {{4, "--fsdp --ep 2 --fsdp-overlap on"}};
const std::vector<std::pair<int, std::string>> kEpV3 = {{4, "--fsdp --ep 2"},
                                                          {2, "--ep 2 --activation-checkpointing"}};
const std::vector<std::pair<int, std::string>> kEpReplicated = {{2, "--ep 2"}, {4, "--ep 2 --activation-checkpointing"}};

INSTANTIATE_TEST_SUITE_P(
    Meshes, DataParallel,
    ::testing::Values(DataParallelVariant{false, on_2_and_4(""), "Lora"}, DataParallelVariant{true, on_2_and_4(""), "Full"},
                      DataParallelVariant{false, on_2_and_4("--fsdp"), "LoraFsdp"},
                      DataParallelVariant{true, on_2_and_4("--fsdp"), "FullFsdp"},
                      DataParallelVariant{false, on_2_and_4("--activation-checkpointing"), "LoraCheckpointing"},
                      DataParallelVariant{true, on_2_and_4("--fsdp --activation-checkpointing --fsdp-overlap on"),
                              "FullFsdpCheckpointing"},
                      DataParallelVariant{false, kEpMeshes, "LoraEpFsdp"}, DataParallelVariant{true, kEpMeshes, "FullEpFsdp"},
                      DataParallelVariant{false, kEpReplicated, "LoraEp"}, DataParallelVariant{true, kEpReplicated, "FullEp"},
                      // EP x FSDP on 4 ranks in float32 and in bf16. bf16's bars, relative:
                      // losses and norms 1e-2, each step's gradients as a set 5e-2, the
                      // trained weights as a set 3e-2 (measured: 1.5e-3, 3.2e-2, 1.3e-2).
                      DataParallelVariant{false, kEp2Fsdp4, "LoraEpFsdpFloat32", "float32", 1e-5, 1e-4},
                      DataParallelVariant{true, kEp2Fsdp4, "FullEpFsdpFloat32", "float32", 1e-5, 1e-4},
                      DataParallelVariant{false, kEp2Fsdp4, "LoraEpFsdpBf16", "bfloat16", 1e-2, 5e-2, 3e-2},
                      DataParallelVariant{true, kEp2Fsdp4, "FullEpFsdpBf16", "bfloat16", 1e-2, 5e-2, 3e-2},
                      // DeepSeek-V3, Qwen3.5-MoE, DeepSeek-V4 and Qwen3-Next under EP x FSDP (and
                      // replicated EP with recompute).
                      DataParallelVariant{false, kEpV3, "DeepseekV3LoraEpFsdp", "float64", 1e-9, 1e-9, -1, "deepseek_v3"},
                      DataParallelVariant{true, kEpV3, "DeepseekV3FullEpFsdp", "float64", 1e-9, 1e-9, -1, "deepseek_v3"},
                      DataParallelVariant{false, kEpV3, "Qwen3_5LoraEpFsdp", "float64", 1e-9, 1e-9, -1, "qwen3_5_moe_text"},
                      DataParallelVariant{true, kEpV3, "Qwen3_5FullEpFsdp", "float64", 1e-9, 1e-9, -1, "qwen3_5_moe_text"},
                      DataParallelVariant{false, kEpV3, "DeepseekV4LoraEpFsdp", "float64", 1e-9, 1e-9, -1, "deepseek_v4"},
                      DataParallelVariant{true, kEpV3, "DeepseekV4FullEpFsdp", "float64", 1e-9, 1e-9, -1, "deepseek_v4"},
                      DataParallelVariant{false, kEpV3, "Qwen3NextLoraEpFsdp", "float64", 1e-9, 1e-9, -1, "qwen3_next"},
                      DataParallelVariant{true, kEpV3, "Qwen3NextFullEpFsdp", "float64", 1e-9, 1e-9, -1, "qwen3_next"}),
    [](const auto& info) { return info.param.name; });

// Every registered family, at its own tiny configuration (its registry entry's), LoRA and
// full training under EP x FSDP and replicated EP with recompute: a family added to the
// registry is covered here without an edit.
std::vector<DataParallelVariant> registry_variants() {
  std::vector<DataParallelVariant> out;
  for (const glint::ModelFamily* f : glint::model_families()) {
    nlohmann::json cfg = f->tiny(16).to_json();
    cfg["initializer_range"] = 0.1;  // gradients large enough for clipping to act
    for (bool full : {false, true}) {
      DataParallelVariant v{full, kEpV3, f->name() + (full ? "Full" : "Lora"), "float64"};
      v.model_type = cfg["model_type"].get<std::string>();
      v.config = cfg;
      out.push_back(v);
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Registry, DataParallel, ::testing::ValuesIn(registry_variants()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
