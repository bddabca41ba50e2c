// Reinforcement learning through glint serve, the loop of examples/rl_reverse_digits.py
// on a task small enough for a test: a tiny random model is asked to answer BOS d SEP
// with the digit d. Each iteration saves the current weights for a sampler, samples a
// group of completions of every prompt at temperature 1, rewards them here, and trains
// on reward - group mean with the importance_sampling loss: the mean sampled reward
// rises well above the random model's (about 1 in 16).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <numeric>

#include "data/synthetic.h"
#include "serve/serve_util.h"

namespace {

using json = nlohmann::json;
using glint::testing::Reply;
using glint::testing::ServeProcess;
using glint::testing::TinkerClient;

// The built-in task's BOS and SEP ids; digits are ids 0..9.
constexpr int64_t kRlBos = glint::ReverseDigitsTask::kBos, kRlSep = glint::ReverseDigitsTask::kSep;

// An importance_sampling Datum: prompt + completion, the sampler's log-probabilities and
// `advantage` on the completion's targets, zeros on the prompt's.
json rl_datum(const std::vector<int64_t>& prompt, const std::vector<int64_t>& completion,
              const std::vector<double>& logprobs, double advantage) {
  std::vector<int64_t> seq = prompt;
  seq.insert(seq.end(), completion.begin(), completion.end());
  std::vector<int64_t> in(seq.begin(), seq.end() - 1), target(seq.begin() + 1, seq.end());
  std::vector<double> q(prompt.size() - 1, 0.0), adv(prompt.size() - 1, 0.0);
  q.insert(q.end(), logprobs.begin(), logprobs.end());
  adv.resize(target.size(), advantage);
  return {{"model_input", {{"chunks", {{{"type", "encoded_text"}, {"tokens", in}}}}}},
          {"loss_fn_inputs", {{"target_tokens", {{"data", target}, {"dtype", "int64"}}},
                              {"logprobs", {{"data", q}, {"dtype", "float32"}}},
                              {"advantages", {{"data", adv}, {"dtype", "float32"}}}}}};
}

TEST(ServiceRl, GroupRelativeImportanceSamplingRaisesTheSampledReward) {
  const std::string dir = glint::testing::fresh_temp_dir("serve_rl");
  const std::string model = glint::testing::make_model(dir);
  ServeProcess server;
  // float64: the sampler's batches, made of whatever requests arrived together, round
  // alike, so the run repeats. One intra-op thread: the model is tiny.
  server.start_server(dir, "--model " + model + " --state-dir " + dir +
                               "/state --insecure-no-auth --dtype float64 --threads 1 --cycle-window-ms 0");
  TinkerClient client(server.port);
  const std::string session = client.session();
  const std::string id = client.create_model(session, client.base_model(), 8, 1);
  ASSERT_FALSE(id.empty());

  constexpr int kIterations = 50, kGroup = 8, kWindow = 10;
  constexpr double kLr = 1e-2;
  const json adam = {{"learning_rate", kLr}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}};
  std::vector<double> mean_reward;
  int64_t seq = 1;
  for (int it = 0; it < kIterations; ++it) {
    // The current weights as a sampling session of their own.
    json saved = client.call("save_weights_for_sampler",
                             {{"model_id", id}, {"seq_id", seq++}, {"sampling_session_seq_id", it + 1}});
    ASSERT_TRUE(saved.contains("sampling_session_id")) << saved.dump();
    // Every digit is a prompt; its group of samples is sent before any is waited for.
    std::vector<json> futures;
    for (int64_t d = 0; d < 10; ++d) {
      Reply r = client.post("asample", {{"sampling_session_id", saved["sampling_session_id"]},
                                        {"prompt", {{"chunks", {{{"tokens", {kRlBos, d, kRlSep}}}}}}},
                                        {"num_samples", kGroup},
                                        {"sampling_params", {{"max_tokens", 1}, {"temperature", 1.0},
                                                             {"seed", (it * 10 + d) * kGroup}}}});
      ASSERT_EQ(r.status, 200) << r.body.dump();
      futures.push_back(r.body);
    }
    json data = json::array();
    double total = 0;
    for (int64_t d = 0; d < 10; ++d) {
      const json res = client.wait(futures[d]);
      ASSERT_EQ(res.value("sequences", json::array()).size(), size_t(kGroup)) << res.dump();
      std::vector<double> reward;
      for (const json& s : res["sequences"]) reward.push_back(s["tokens"] == json::array({d}) ? 1.0 : 0.0);
      const double mean = std::accumulate(reward.begin(), reward.end(), 0.0) / kGroup;
      total += mean;
      for (int k = 0; k < kGroup; ++k)
        if (reward[k] != mean)  // a group whose rewards are all equal has no advantage
          data.push_back(rl_datum({kRlBos, d, kRlSep}, res["sequences"][k]["tokens"].get<std::vector<int64_t>>(),
                                  res["sequences"][k]["logprobs"].get<std::vector<double>>(), reward[k] - mean));
    }
    mean_reward.push_back(total / 10);
    if (data.empty()) continue;
    // One forward_backward and one optimizer step, sent together.
    Reply fb = client.post("forward_backward", {{"model_id", id}, {"seq_id", seq++},
                                                {"forward_backward_input", {{"data", data},
                                                                            {"loss_fn", "importance_sampling"}}}});
    Reply opt = client.post("optim_step", {{"model_id", id}, {"seq_id", seq++}, {"adam_params", adam}});
    ASSERT_EQ(fb.status, 200) << fb.body.dump();
    ASSERT_EQ(opt.status, 200) << opt.body.dump();
    ASSERT_TRUE(client.wait(fb.body).contains("metrics"));
    ASSERT_TRUE(client.wait(opt.body).contains("metrics"));
  }
  const double first = std::accumulate(mean_reward.begin(), mean_reward.begin() + kWindow, 0.0) / kWindow;
  const double last = std::accumulate(mean_reward.end() - kWindow, mean_reward.end(), 0.0) / kWindow;
  std::printf("mean sampled reward: first %d iterations %.3f, last %d %.3f\n", kWindow, first, kWindow, last);
  // 0.19 -> 0.58 here; over eight LoRA and sampling seeds the rise was 0.28 to 0.46, and
  // 0.02 with a learning rate of 0.
  EXPECT_GT(last, first + 0.2) << "first " << kWindow << " iterations " << first << ", last " << last;
  EXPECT_EQ(server.stop(), 0) << glint::read_file(server.log);
}

}  // namespace
