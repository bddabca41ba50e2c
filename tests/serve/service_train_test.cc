// A tenant trained through glint serve equals the same tenant trained by glint train
// alone, in float64, while another tenant trains in the same cycles; on one process and
// on 4 ranks with --ep 2 --fsdp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "io/safetensors.h"
#include "serve/serve_util.h"

namespace {

using glint::testing::ce_datum;
using glint::testing::make_data;
using glint::testing::make_model;
using glint::testing::ServeProcess;
using glint::testing::TinkerClient;

std::vector<std::vector<int64_t>> read_ids(const std::string& path) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& j : glint::testing::read_jsonl(path)) out.push_back(j.at("input_ids").get<std::vector<int64_t>>());
  return out;
}

struct Mesh {
  int ranks;
  std::string args;
};

class ServiceTraining : public ::testing::TestWithParam<Mesh> {};

TEST_P(ServiceTraining, TenantEqualsGlintTrainAloneWithAnotherTenantConcurrently) {
  const Mesh mesh = GetParam();
  const std::string dir = glint::testing::fresh_temp_dir("serve_train_" + std::to_string(mesh.ranks));
  const std::string model = make_model(dir);
  const std::string data_a = make_data(dir + "/a.jsonl", 4, 1), data_b = make_data(dir + "/b.jsonl", 4, 2);
  const int steps = 5;
  const double lr = 0.02;
  // The reference: tenant a alone, every step its whole data (one epoch: the order within
  // a step does not change the sum), constant learning rate, clipping at 1.
  glint::testing::RunResult ref = glint::testing::run_glint(
      "train --model " + model + " --tenant name=a,r=4,data=" + data_a + ",steps=5,batch=4,lr=0.02,warmup=0,seed=7," +
      "beta2=0.95,eps=1e-8 --dtype float64 --min-lr-ratio 1 --max-grad-norm 1 --eval-every 0 --output " + dir + "/ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.output;

  ServeProcess server;
  server.start_server(dir, "--model " + model + " --state-dir " + dir + "/state --insecure-no-auth --dtype float64 " +
                               "--cycle-window-ms 50 " + mesh.args, mesh.ranks);
  TinkerClient client(server.port);
  const std::string session = client.session();
  const std::string base = client.base_model();
  const std::string a = client.create_model(session, base, 4, 7), b = client.create_model(session, base, 4, 9);
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  const auto ids_a = read_ids(data_a), ids_b = read_ids(data_b);
  auto label_tokens = [](const std::vector<std::vector<int64_t>>& ids) {
    int64_t n = 0;
    for (const auto& s : ids) n += int64_t(s.size()) - 1;
    return double(n);
  };
  const nlohmann::json adam = {{"learning_rate", lr}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8},
                               {"weight_decay", 0.0}, {"grad_clip_norm", 1.0}};
  std::vector<double> losses;
  int64_t seq = 1;
  for (int step = 0; step < steps; ++step) {
    // Both tenants submit two forward_backward calls and an optimizer step before
    // waiting, as the SDK does: they share cycles.
    std::vector<nlohmann::json> futures_a, futures_b;
    for (int half = 0; half < 2; ++half) {
      for (const auto& [model_id, ids, out] :
           {std::tuple{a, &ids_a, &futures_a}, std::tuple{b, &ids_b, &futures_b}}) {
        nlohmann::json data = nlohmann::json::array();
        for (int i = half * 2; i < half * 2 + 2; ++i) data.push_back(ce_datum((*ids)[i], 1.0 / label_tokens(*ids)));
        auto r = client.post("forward_backward", {{"model_id", model_id}, {"seq_id", seq + half},
                                                  {"forward_backward_input", {{"data", data}, {"loss_fn", "cross_entropy"}}}});
        ASSERT_EQ(r.status, 200) << r.body.dump();
        out->push_back(r.body);
      }
    }
    for (const auto& [model_id, out] : {std::pair{a, &futures_a}, std::pair{b, &futures_b}}) {
      auto r = client.post("optim_step", {{"model_id", model_id}, {"seq_id", seq + 2}, {"adam_params", adam}});
      ASSERT_EQ(r.status, 200) << r.body.dump();
      out->push_back(r.body);
    }
    seq += 3;
    double loss = 0;
    for (int i = 0; i < 2; ++i) {
      nlohmann::json res = client.wait(futures_a[i]);
      ASSERT_TRUE(res.contains("metrics")) << res.dump();
      loss += res["metrics"]["loss:sum"].get<double>();
      ASSERT_EQ(res["loss_fn_outputs"].size(), 2u);
    }
    losses.push_back(loss);
    ASSERT_TRUE(client.wait(futures_a[2]).contains("metrics"));
    for (const auto& f : futures_b) ASSERT_FALSE(client.wait(f).contains("error"));
  }
  nlohmann::json saved = client.call("save_weights_for_sampler", {{"model_id", a}, {"path", "final"}, {"seq_id", seq}});
  ASSERT_EQ(saved.value("path", ""), "tinker://" + a + "/sampler_weights/final") << saved.dump();
  // Sampling from it on this mesh: greedy, and at temperature 1 with a seed; the first
  // token's log-probability is the forward pass's.
  const nlohmann::json prompt = {{"chunks", {{{"tokens", {1, 2, 3}}}}}};
  nlohmann::json greedy = client.call("asample", {{"model_path", saved["path"]}, {"prompt", prompt}, {"num_samples", 2},
                                                  {"sampling_params", {{"max_tokens", 4}, {"temperature", 0.0}}}});
  ASSERT_EQ(greedy["sequences"].size(), 2u) << greedy.dump();
  EXPECT_EQ(greedy["sequences"][0]["tokens"], greedy["sequences"][1]["tokens"]);
  const int64_t first = greedy["sequences"][0]["tokens"][0];
  nlohmann::json fwd = client.call("forward", {{"model_id", a}, {"forward_input", {{"data", {ce_datum({1, 2, 3, first}, 1.0)}},
                                                                                   {"loss_fn", "cross_entropy"}}}});
  EXPECT_NEAR(fwd["loss_fn_outputs"][0]["logprobs"]["data"][2].get<double>(),
              greedy["sequences"][0]["logprobs"][0].get<double>(), 1e-10);
  nlohmann::json sampled = client.call("asample", {{"model_path", saved["path"]}, {"prompt", prompt}, {"num_samples", 3},
                                                   {"sampling_params", {{"max_tokens", 6}, {"seed", 5}}}});
  ASSERT_EQ(sampled["sequences"].size(), 3u) << sampled.dump();
  EXPECT_EQ(server.stop(), 0) << glint::read_file(server.log);

  // The step losses: the label-token mean of the step, the same sum.
  auto metrics = glint::testing::read_jsonl(dir + "/ref/metrics.jsonl");
  ASSERT_EQ(metrics.size(), size_t(steps));
  for (int s = 0; s < steps; ++s) {
    const double expect = metrics[s]["loss"].get<double>();  // tenant a alone: the run's loss
    EXPECT_LT(glint::testing::rel(losses[s], expect), 1e-12) << "step " << s + 1 << ": " << losses[s] << " vs " << expect;
  }
  glint::SafetensorsFile got(dir + "/state/runs/" + a + "/sampler_weights/final/adapter_model.safetensors");
  glint::SafetensorsFile want(dir + "/ref/a/adapter/adapter_model.safetensors");
  ASSERT_EQ(got.keys(), want.keys());
  for (const auto& key : want.keys()) {
    at::Tensor x = got.read(key), y = want.read(key);
    ASSERT_EQ(x.scalar_type(), at::kDouble) << key;
    const double scale = std::max(1e-300, y.abs().max().item<double>());
    EXPECT_LT((x - y).abs().max().item<double>() / scale, 1e-11) << key;
  }
  // And the adapter moved: B starts at zero.
  bool moved = false;
  for (const auto& key : want.keys())
    if (key.find("lora_B") != std::string::npos) moved |= want.read(key).abs().max().item<double>() > 0;
  EXPECT_TRUE(moved);
}

INSTANTIATE_TEST_SUITE_P(Meshes, ServiceTraining,
                         ::testing::Values(Mesh{1, ""}, Mesh{4, "--ep 2 --fsdp"}),
                         [](const auto& info) { return info.param.ranks == 1 ? std::string("OneProcess")
                                                                              : std::string("FourRanksEp2Fsdp"); });

}  // namespace
