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
using glint::testing::Reply;
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

// Models are not slots: five models trained interleaved on a server with two slots (the
// others paged out to disk, accumulated gradients included) equal each model trained
// alone, in float64; a graceful restart in the middle keeps every model where it was,
// and after a SIGKILL the models that were on disk continue while those that were in
// memory are refused, saying why and from where to continue. On one process and on 4
// ranks (each rank's share of a gradient is paged with it).
class ServicePaging : public ::testing::TestWithParam<Mesh> {};

TEST_P(ServicePaging, FiveModelsInTwoSlotsTrainAsEachAloneAcrossRestarts) {
  using json = nlohmann::json;
  const Mesh mesh = GetParam();
  const std::string dir = glint::testing::fresh_temp_dir("serve_paging_" + std::to_string(mesh.ranks));
  const std::string model = make_model(dir);
  const int n = 5, steps = 3;
  std::vector<std::vector<std::vector<int64_t>>> data;
  for (int i = 0; i < n; ++i) data.push_back(read_ids(make_data(dir + "/d" + std::to_string(i) + ".jsonl", 4, 10 + i)));
  const json adam = {{"learning_rate", 0.02}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"grad_clip_norm", 1.0}};
  auto half = [&](int i, int h) {
    json d = json::array();
    for (int k = 2 * h; k < 2 * h + 2; ++k) d.push_back(ce_datum(data[i][k], 0.1));
    return json{{"data", d}, {"loss_fn", "cross_entropy"}};
  };
  const json probe = json{{"data", {ce_datum({1, 2, 3, 4, 5, 6}, 1.0)}}, {"loss_fn", "cross_entropy"}};
  const std::string args = " --insecure-no-auth --dtype float64 --cycle-window-ms 0 " + mesh.args + " --state-dir ";

  // The reference: each model trained alone, one after the other, all slots free.
  // losses[i][s]: model i's forward_backward loss sums in step s.
  std::vector<std::vector<double>> ref_losses(n), losses(n);
  std::vector<json> ref_probe(n);
  {
    ServeProcess server;
    server.start_server(dir, "--model " + model + args + dir + "/ref --max-tenants 8", mesh.ranks);
    TinkerClient c(server.port);
    const std::string session = c.session(), base = c.base_model();
    for (int i = 0; i < n; ++i) {
      const std::string id = c.create_model(session, base, 4, 20 + i);
      for (int s = 0; s < steps; ++s) {
        double loss = 0;
        for (int h = 0; h < 2; ++h)
          loss += c.call("forward_backward", {{"model_id", id}, {"forward_backward_input", half(i, h)}})["metrics"]["loss:sum"]
                      .get<double>();
        ASSERT_TRUE(c.call("optim_step", {{"model_id", id}, {"adam_params", adam}}).contains("metrics"));
        ref_losses[i].push_back(loss);
      }
      ref_probe[i] = c.call("forward", {{"model_id", id}, {"forward_input", probe}})["loss_fn_outputs"];
    }
    EXPECT_EQ(server.stop(), 0);
  }

  // Two slots, five models, every request of a step submitted before any is waited for:
  // both halves of every model's gradient, then every update.
  ServeProcess server;
  const std::string serve = "--model " + model + args + dir + "/paged --max-tenants 2";
  server.start_server(dir, serve, mesh.ranks);
  std::vector<std::string> ids;
  std::vector<int64_t> seq(n, 1);
  {
    TinkerClient c(server.port);
    const std::string session = c.session(), base = c.base_model();
    for (int i = 0; i < n; ++i) ids.push_back(c.create_model(session, base, 4, 20 + i));
  }
  // `one_by_one`: each forward_backward is waited for before the next is sent, so a model
  // idles between its two halves and leaves its slot holding half a gradient.
  auto step = [&](int s, bool one_by_one) {
    TinkerClient c(server.port);
    std::vector<std::vector<json>> futures(n);
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < n; ++i) {
        Reply r = c.post("forward_backward", {{"model_id", ids[i]}, {"seq_id", seq[i]++}, {"forward_backward_input", half(i, h)}});
        ASSERT_EQ(r.status, 200) << r.body.dump();
        futures[i].push_back(r.body);
        if (one_by_one) c.wait(r.body);
      }
    for (int i = 0; i < n; ++i) {
      Reply r = c.post("optim_step", {{"model_id", ids[i]}, {"seq_id", seq[i]++}, {"adam_params", adam}});
      ASSERT_EQ(r.status, 200) << r.body.dump();
      futures[i].push_back(r.body);
    }
    for (int i = 0; i < n; ++i) {
      const json a = c.wait(futures[i][0]), b = c.wait(futures[i][1]);
      ASSERT_TRUE(a.contains("metrics") && b.contains("metrics")) << "model " << i << ", step " << s << ": " << a.dump()
                                                                  << " " << b.dump();
      losses[i].push_back(a["metrics"]["loss:sum"].get<double>() + b["metrics"]["loss:sum"].get<double>());
      ASSERT_TRUE(c.wait(futures[i][2]).contains("metrics")) << "model " << i << ", step " << s;
    }
  };
  step(0, false);
  step(1, true);
  // All but the two models in slots are on disk.
  int on_disk = 0;
  for (int i = 0; i < n; ++i)
    on_disk += glint::read_json_file(dir + "/paged/runs/" + ids[i] + "/state.json").value("state", "") == "paged";
  EXPECT_EQ(on_disk, n - 2);
  // SIGTERM: the models in slots go to disk; a new process continues every one of them.
  ASSERT_EQ(server.stop(), 0) << glint::read_file(server.log);
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(glint::read_json_file(dir + "/paged/runs/" + ids[i] + "/state.json").value("step", -1), 2) << i;
  server.start_server(dir, serve, mesh.ranks);
  step(2, false);
  for (int i = 0; i < n; ++i)
    for (int s = 0; s < steps; ++s)
      EXPECT_LT(glint::testing::rel(losses[i][s], ref_losses[i][s]), 1e-12)
          << "model " << i << ", step " << s + 1 << ": " << losses[i][s] << " vs " << ref_losses[i][s];
  TinkerClient c(server.port);
  std::vector<json> probes(n);
  for (int i = 0; i < n; ++i) {
    probes[i] = c.call("forward", {{"model_id", ids[i]}, {"seq_id", seq[i]++}, {"forward_input", probe}})["loss_fn_outputs"];
    const std::vector<double> got = probes[i][0]["logprobs"]["data"], want = ref_probe[i][0]["logprobs"]["data"];
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_LT(glint::testing::rel(got[k], want[k]), 1e-12) << i << " " << k;
  }
  // The last forwards leave two models in slots; one more update makes them differ from
  // their paged copies. Then SIGKILL: no page-out.
  for (int i = n - 2; i < n; ++i) {
    c.call("forward_backward", {{"model_id", ids[i]}, {"seq_id", seq[i]++}, {"forward_backward_input", half(i, 0)}});
    c.call("optim_step", {{"model_id", ids[i]}, {"seq_id", seq[i]++}, {"adam_params", adam}});
  }
  server.kill9();
  server.start_server(dir, serve, mesh.ranks);
  TinkerClient after(server.port);
  int continued = 0, refused = 0;
  for (int i = 0; i < n; ++i) {
    Reply r = after.post("forward", {{"model_id", ids[i]}, {"seq_id", seq[i]}, {"forward_input", probe}});
    if (r.status == 200) {
      ++continued;
      EXPECT_NE(r.body.value("message", "").find("continues from its state at step 3"), std::string::npos) << r.body.dump();
      EXPECT_EQ(after.wait(r.body)["loss_fn_outputs"], probes[i]) << "model " << i;
    } else {
      ++refused;
      EXPECT_EQ(r.status, 410) << r.body.dump();
      const std::string e = r.body.value("error", "");
      EXPECT_NE(e.find("was in memory when the server stopped"), std::string::npos) << e;
      EXPECT_NE(e.find("saved no checkpoints of its own"), std::string::npos) << e;
    }
  }
  EXPECT_EQ(continued, n - 2);
  EXPECT_EQ(refused, 2);
  EXPECT_EQ(server.stop(), 0) << glint::read_file(server.log);
}

std::string mesh_name(const ::testing::TestParamInfo<Mesh>& info) {
  return info.param.ranks == 1 ? "OneProcess" : "FourRanksEp2Fsdp";
}
INSTANTIATE_TEST_SUITE_P(Meshes, ServiceTraining, ::testing::Values(Mesh{1, ""}, Mesh{4, "--ep 2 --fsdp"}), mesh_name);
INSTANTIATE_TEST_SUITE_P(Meshes, ServicePaging, ::testing::Values(Mesh{1, ""}, Mesh{4, "--ep 2 --fsdp"}), mesh_name);

}  // namespace
