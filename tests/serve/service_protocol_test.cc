// The Tinker API as the SDK (v0.16.1) sends it, route by route, written from the SDK's
// request and response shapes: defaults filled for omitted fields, futures and their
// try_again answers, errors with their status and category, owners kept apart, and
// faults (malformed requests, a client gone mid-request, a server killed while saving).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "serve/proto_util.h"
#include "serve/serve_util.h"
#include "serve/service.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using glint::testing::ce_datum;
using glint::testing::Reply;
using glint::testing::ServeProcess;
using glint::testing::TinkerClient;
using json = nlohmann::json;

using glint::testing::kAlice;
using glint::testing::kBob;

// One server for the suite: two owners, three model slots, a 1 MB body limit.
class Service : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(glint::testing::fresh_temp_dir("serve_protocol"));
    model_ = new std::string(glint::testing::make_model(*dir_));
    std::ofstream(*dir_ + "/keys") << "# operator's keys\n" << kAlice << " alice\n" << kBob << " bob\n";
    server_ = new ServeProcess;
    server_->start_server(*dir_, "--model " + *model_ + " --state-dir " + *dir_ + "/state --api-keys " + *dir_ +
                                     "/keys --dtype float64 --max-tenants 3 --max-body-mb 1 --cycle-window-ms 5");
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0) << glint::read_file(server_->log);
    delete server_;
    delete model_;
    delete dir_;
  }
  static std::string base(TinkerClient& c) { return c.base_model(); }
  static std::string* dir_;
  static std::string* model_;
  static ServeProcess* server_;
};
std::string* Service::dir_ = nullptr;
std::string* Service::model_ = nullptr;
ServeProcess* Service::server_ = nullptr;

json forward_body(const std::string& model, const std::vector<json>& data, const std::string& loss = "cross_entropy",
                  json config = nullptr, int64_t seq = -1) {
  json input = {{"data", data}, {"loss_fn", loss}};
  if (!config.is_null()) input["loss_fn_config"] = config;
  json b = {{"model_id", model}, {"forward_backward_input", input}};
  if (seq > 0) b["seq_id"] = seq;
  return b;
}

TEST_F(Service, EveryRouteWithTheSdksShapesAndDefaults) {
  TinkerClient c(server_->port, kAlice);
  EXPECT_EQ(c.get("healthz").body, json({{"status", "ok"}}));
  Reply caps = c.get("get_server_capabilities");
  ASSERT_EQ(caps.status, 200);
  ASSERT_EQ(caps.body["supported_models"].size(), 1u);
  // Newer SDKs ask for their client config first; the answer keeps them on JSON and httpx.
  Reply cfg = c.post("client/config", {{"sdk_version", "0.24.1"}});
  EXPECT_EQ(cfg.status, 200);
  EXPECT_EQ(cfg.body["use_pyqwest_transport"], false);
  EXPECT_EQ(c.post("telemetry", {{"events", json::array()}}).body["status"], "accepted");
  const std::string session = c.session();
  ASSERT_FALSE(session.empty());
  EXPECT_EQ(c.post("session_heartbeat", {{"session_id", session}}).body["type"], "session_heartbeat");

  // create_model with every optional field omitted (exclude_unset): seed and train_* default.
  Reply fut = c.post("create_model", {{"session_id", session}, {"model_seq_id", 0}, {"base_model", base(c)},
                                      {"lora_config", {{"rank", 4}}}});
  ASSERT_EQ(fut.status, 200) << fut.body.dump();
  ASSERT_TRUE(fut.body.contains("request_id"));
  const std::string id = c.wait(fut.body).at("model_id");
  Reply info = c.post("get_info", {{"model_id", id}});
  EXPECT_EQ(info.body["model_id"], id);
  EXPECT_EQ(info.body["is_lora"], true);
  EXPECT_EQ(info.body["lora_rank"], 4);
  EXPECT_EQ(info.body["model_data"]["model_name"], base(c));

  // forward: per-datum log-probabilities of the targets and loss:sum, nothing trained.
  const std::vector<int64_t> seq_a = {1, 2, 3, 4, 5}, seq_b = {6, 7, 8};
  json fwd = c.call("forward", {{"model_id", id}, {"forward_input", {{"data", {ce_datum(seq_a, 1.0), ce_datum(seq_b, 1.0)}},
                                                                     {"loss_fn", "cross_entropy"}}}});
  ASSERT_EQ(fwd["loss_fn_outputs"].size(), 2u) << fwd.dump();
  const json lp = fwd["loss_fn_outputs"][0]["logprobs"];
  EXPECT_EQ(lp["dtype"], "float32");
  EXPECT_EQ(lp["shape"], json({4}));
  double sum = 0;
  for (const auto& o : fwd["loss_fn_outputs"])
    for (double x : o["logprobs"]["data"]) sum -= x;
  EXPECT_NEAR(fwd["metrics"]["loss:sum"].get<double>(), sum, 1e-9);  // weights 1: -sum of lp

  // forward_backward, then optim_step with every Adam parameter omitted (the SDK's defaults).
  double loss_a = 0;  // datum a alone
  for (double x : lp["data"]) loss_a -= x;
  json fb = c.call("forward_backward", forward_body(id, {ce_datum(seq_a, 1.0)}, "cross_entropy", nullptr, 1));
  EXPECT_NEAR(fb["metrics"]["loss:sum"].get<double>(), loss_a, 1e-9);
  json opt = c.call("optim_step", {{"model_id", id}, {"seq_id", 2}, {"adam_params", json::object()}});
  ASSERT_TRUE(opt.contains("metrics")) << opt.dump();
  EXPECT_GT(opt["metrics"]["grad_norm:mean"].get<double>(), 0);
  json fwd2 = c.call("forward", {{"model_id", id}, {"forward_input", {{"data", {ce_datum(seq_a, 1.0)}}, {"loss_fn", "cross_entropy"}}}});
  EXPECT_LT(fwd2["metrics"]["loss:sum"].get<double>(), loss_a);  // it learned

  // save_weights: a named state and a generated name; save_weights_for_sampler both ways.
  json saved = c.call("save_weights", {{"model_id", id}, {"path", "first"}, {"seq_id", 3}});
  EXPECT_EQ(saved["path"], "tinker://" + id + "/weights/first");
  json unnamed = c.call("save_weights", {{"model_id", id}, {"seq_id", 4}});
  EXPECT_EQ(unnamed["path"].get<std::string>().rfind("tinker://" + id + "/weights/", 0), 0u) << unnamed.dump();
  json sampler = c.call("save_weights_for_sampler", {{"model_id", id}, {"path", "s1"}, {"seq_id", 5}});
  EXPECT_EQ(sampler["path"], "tinker://" + id + "/sampler_weights/s1");
  json ephemeral = c.call("save_weights_for_sampler", {{"model_id", id}, {"sampling_session_seq_id", 0}, {"seq_id", 6}});
  EXPECT_TRUE(ephemeral["path"].is_null()) << ephemeral.dump();
  ASSERT_TRUE(ephemeral["sampling_session_id"].is_string());
  // A name is never overwritten.
  Reply again = c.post("save_weights", {{"model_id", id}, {"path", "first"}, {"seq_id", 7}});
  EXPECT_EQ(again.status, 409) << again.body.dump();

  // Sampling: greedy is deterministic, per-token logprobs always, prompt logprobs on request.
  Reply ss = c.post("create_sampling_session", {{"session_id", session}, {"sampling_session_seq_id", 1},
                                                 {"model_path", "tinker://" + id + "/sampler_weights/s1"}});
  ASSERT_EQ(ss.status, 200) << ss.body.dump();
  json prompt = {{"chunks", {{{"tokens", {1, 2, 3}}}}}};
  json sample = c.call("asample", {{"sampling_session_id", ss.body["sampling_session_id"]}, {"seq_id", 1},
                                   {"num_samples", 3}, {"prompt", prompt}, {"prompt_logprobs", true},
                                   {"sampling_params", {{"max_tokens", 6}, {"temperature", 0.0}}}});
  ASSERT_EQ(sample["sequences"].size(), 3u) << sample.dump();
  for (const auto& s : sample["sequences"]) {
    EXPECT_EQ(s["tokens"], sample["sequences"][0]["tokens"]);
    EXPECT_EQ(s["tokens"].size(), s["logprobs"].size());
    EXPECT_EQ(s["stop_reason"], "length");
  }
  ASSERT_EQ(sample["prompt_logprobs"].size(), 3u);
  EXPECT_TRUE(sample["prompt_logprobs"][0].is_null());
  // A stop token id ends the sequence, kept as its last token.
  const int64_t first = sample["sequences"][0]["tokens"][0];
  json stopped = c.call("asample", {{"sampling_session_id", ss.body["sampling_session_id"]}, {"num_samples", 1},
                                    {"prompt", prompt}, {"sampling_params", {{"max_tokens", 6}, {"temperature", 0.0},
                                                                             {"stop", {first}}}}});
  EXPECT_EQ(stopped["sequences"][0]["tokens"], json({first}));
  EXPECT_EQ(stopped["sequences"][0]["stop_reason"], "stop");
  // The sampler of the trained weights equals the forward pass's log-probabilities:
  // the first sampled token's logprob is the model's log p(token | prompt).
  json check = c.call("forward", {{"model_id", id}, {"forward_input", {{"data", {ce_datum({1, 2, 3, first}, 1.0)}},
                                                                       {"loss_fn", "cross_entropy"}}}});
  EXPECT_NEAR(check["loss_fn_outputs"][0]["logprobs"]["data"][2].get<double>(),
              sample["sequences"][0]["logprobs"][0].get<double>(), 1e-9);
  // Default sampling parameters (temperature 1, all top-k/top-p), with a seed: reproducible.
  json s1 = c.call("asample", {{"sampling_session_id", ephemeral["sampling_session_id"]}, {"prompt", prompt},
                               {"sampling_params", {{"max_tokens", 5}, {"seed", 11}}}});
  json s2 = c.call("asample", {{"sampling_session_id", ephemeral["sampling_session_id"]}, {"prompt", prompt},
                               {"sampling_params", {{"max_tokens", 5}, {"seed", 11}}}});
  EXPECT_EQ(s1["sequences"], s2["sequences"]);
  // ...and it samples: some seed leaves the greedy path (a server that fell back to
  // greedy would return the greedy tokens for every seed).
  json greedy5 = c.call("asample", {{"sampling_session_id", ephemeral["sampling_session_id"]}, {"prompt", prompt},
                                    {"sampling_params", {{"max_tokens", 5}, {"temperature", 0.0}}}});
  bool left_greedy = false;
  for (int seed = 1; seed <= 8 && !left_greedy; ++seed) {
    json s = c.call("asample", {{"sampling_session_id", ephemeral["sampling_session_id"]}, {"prompt", prompt},
                                {"sampling_params", {{"max_tokens", 5}, {"seed", seed}}}});
    left_greedy = s["sequences"][0]["tokens"] != greedy5["sequences"][0]["tokens"];
  }
  EXPECT_TRUE(left_greedy);
  json base_sample = c.call("asample", {{"base_model", base(c)}, {"prompt", prompt}, {"sampling_params", {{"max_tokens", 2}}}});
  EXPECT_EQ(base_sample["sequences"].size(), 1u) << base_sample.dump();

  // load_weights with and without optimizer; weights_info.
  EXPECT_EQ(c.call("load_weights", {{"model_id", id}, {"path", saved["path"]}, {"optimizer", true}, {"seq_id", 8}})["path"],
            saved["path"]);
  json after = c.call("forward", {{"model_id", id}, {"forward_input", {{"data", {ce_datum(seq_a, 1.0)}}, {"loss_fn", "cross_entropy"}}}});
  EXPECT_NEAR(after["metrics"]["loss:sum"].get<double>(), fwd2["metrics"]["loss:sum"].get<double>(), 1e-12);
  EXPECT_FALSE(c.call("load_weights", {{"model_id", id}, {"path", saved["path"]}, {"optimizer", false}, {"seq_id", 9}})
                   .contains("error"));
  Reply wi = c.post("weights_info", {{"tinker_path", saved["path"]}});
  EXPECT_EQ(wi.body, json({{"base_model", base(c)}, {"is_lora", true}, {"lora_rank", 4}, {"train_unembed", false},
                           {"train_mlp", true}, {"train_attn", true}}));

  // REST: runs, one run, its checkpoints, all checkpoints, delete, sessions.
  Reply runs = c.get("training_runs?limit=10&offset=0");
  ASSERT_EQ(runs.status, 200);
  EXPECT_EQ(runs.body["cursor"]["limit"], 10);
  bool listed = false;
  for (const auto& r : runs.body["training_runs"]) listed |= r["training_run_id"] == id;
  EXPECT_TRUE(listed) << runs.body.dump();
  Reply run = c.get("training_runs/" + id);
  EXPECT_EQ(run.body["model_owner"], "alice");
  EXPECT_EQ(run.body["lora_rank"], 4);
  Reply cks = c.get("training_runs/" + id + "/checkpoints");
  ASSERT_EQ(cks.status, 200);
  EXPECT_EQ(cks.body["checkpoints"].size(), 3u) << cks.body.dump();  // first, the unnamed one, s1
  for (const auto& ck : cks.body["checkpoints"]) EXPECT_GT(ck["size_bytes"].get<int64_t>(), 0);
  EXPECT_GE(c.get("checkpoints").body["checkpoints"].size(), 3u);
  Reply del = c.del("training_runs/" + id + "/checkpoints/weights/first");
  EXPECT_EQ(del.status, 200) << del.body.dump();
  EXPECT_EQ(c.get("training_runs/" + id + "/checkpoints").body["checkpoints"].size(), 2u);
  EXPECT_EQ(c.del("training_runs/" + id + "/checkpoints/weights/first").status, 404);
  EXPECT_FALSE(fs::exists(*dir_ + "/state/runs/" + id + "/weights/first"));
  Reply sessions = c.get("sessions");
  EXPECT_NE(std::find(sessions.body["sessions"].begin(), sessions.body["sessions"].end(), session),
            sessions.body["sessions"].end());
  Reply one = c.get("sessions/" + session);
  EXPECT_NE(std::find(one.body["training_run_ids"].begin(), one.body["training_run_ids"].end(), id),
            one.body["training_run_ids"].end());

  // unload_model: the model's requests are refused after.
  EXPECT_EQ(c.call("unload_model", {{"model_id", id}})["model_id"], id);
  EXPECT_EQ(c.post("forward_backward", forward_body(id, {ce_datum(seq_a, 1.0)})).status, 400);
}

// What SDK 0.25 sends and reads: forward_backward and forward posted as protobuf, the
// results of forward, forward_backward, sample and compute_logprobs read back as
// protobuf; JSON for everything else. Each protobuf result equals the JSON result of the
// same request (float32 of the same numbers).
TEST_F(Service, ASdk0_25SessionIsProtobufWhereItAsksAndJsonElsewhere) {
  namespace proto = glint::testing::proto;
  const std::string pb = "application/x-protobuf";
  TinkerClient c(server_->port, kAlice);
  EXPECT_EQ(c.post("client/config", {{"sdk_version", "0.25.0"}}).body["proto_write_fwdbwd"], true);
  EXPECT_EQ(c.post("client/config", {{"sdk_version", "0.24.1"}}).body["proto_write_fwdbwd"], false);
  EXPECT_EQ(c.post("client/dynamic_config", {{"sdk_version", "0.25.0"}}).body["refresh_interval_sec"], 300);
  const std::string session = c.session();
  const std::string id = c.create_model(session, base(c), 2, 11);
  const std::vector<int64_t> ids = {5, 3, 8, 1, 9, 2};
  const std::vector<int64_t> in(ids.begin(), ids.end() - 1);
  const std::vector<int64_t> target_ids(ids.begin() + 1, ids.end());
  std::vector<double> target(ids.begin() + 1, ids.end()), weights(in.size(), 1.0);
  weights[0] = 0;
  const std::string datum = proto::datum(in, {{"target_tokens", target}, {"weights", weights}});
  auto fbo_logprobs = [&](const TinkerClient::Raw& r, double* loss) {
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.content_type, pb) << r.body;
    const proto::Fields out = proto::parse(r.body);
    const proto::Fields rec = proto::parse(out.one(2));
    EXPECT_EQ(rec.number(3), 1u);  // num_datums
    const proto::Fields entry = proto::parse(rec.one(2));
    EXPECT_EQ(entry.one(1), "logprobs");
    const proto::Fields batch = proto::parse(entry.one(2));
    EXPECT_EQ(proto::values<int64_t>(batch.one(2)), std::vector<int64_t>({0, int64_t(4 * in.size())}));
    const proto::Fields metric = proto::parse(out.one(3));
    EXPECT_EQ(metric.one(1), "loss:sum");
    *loss = proto::as_double(metric.one(2));
    return proto::values<float>(batch.one(1));
  };
  // forward(): a protobuf POST with forward_only; the future is JSON, its result protobuf.
  TinkerClient::Raw posted =
      c.post_bytes("forward_backward", proto::forward_backward(id, 1, {datum}, "cross_entropy", {}, true), pb);
  ASSERT_EQ(posted.status, 200) << posted.body;
  EXPECT_NE(posted.content_type.find("json"), std::string::npos);
  const json future = json::parse(posted.body);
  double fwd_loss = 0;
  const std::vector<float> lp = fbo_logprobs(c.wait_accepting(future["request_id"], pb), &fwd_loss);
  // The same forward in JSON (0.24), read as JSON.
  json j = c.call("forward", {{"model_id", id}, {"seq_id", 2},
                              {"forward_input",
                               {{"data", {{{"model_input", {{"chunks", {{{"type", "encoded_text"}, {"tokens", in}}}}}},
                                           {"loss_fn_inputs", {{"target_tokens", {{"data", target_ids}, {"dtype", "int64"}}},
                                                               {"weights", {{"data", weights}, {"dtype", "float32"}}}}}}}},
                                {"loss_fn", "cross_entropy"}}}});
  const std::vector<double> lp_json = j["loss_fn_outputs"][0]["logprobs"]["data"];
  ASSERT_EQ(lp.size(), lp_json.size());
  for (size_t i = 0; i < lp.size(); ++i) EXPECT_EQ(lp[i], float(lp_json[i])) << i;
  EXPECT_EQ(fwd_loss, j["metrics"]["loss:sum"].get<double>());
  double expect_loss = 0;
  for (size_t i = 0; i < lp.size(); ++i) expect_loss -= weights[i] * lp_json[i];
  EXPECT_NEAR(fwd_loss, expect_loss, 1e-12);
  // forward_backward in protobuf, optim_step in JSON (its result JSON even when protobuf
  // is accepted: the SDK asks for it only for the two protobuf types).
  TinkerClient::Raw fb =
      c.post_bytes("forward_backward", proto::forward_backward(id, 3, {datum}, "cross_entropy", {}, false), pb);
  ASSERT_EQ(fb.status, 200) << fb.body;
  double fb_loss = 0;
  fbo_logprobs(c.wait_accepting(json::parse(fb.body)["request_id"], pb + ", application/json"), &fb_loss);
  EXPECT_EQ(fb_loss, fwd_loss);
  Reply opt = c.post("optim_step", {{"model_id", id}, {"seq_id", 4}, {"adam_params", {{"learning_rate", 0.01}}}});
  TinkerClient::Raw opt_result = c.wait_accepting(opt.body["request_id"], pb);
  EXPECT_NE(opt_result.content_type.find("json"), std::string::npos);
  EXPECT_GT(json::parse(opt_result.body)["metrics"]["grad_norm:mean"].get<double>(), 0);
  // A loss with its config (ppo's clip thresholds) through protobuf, as forward().
  const std::string ppo = proto::datum(in, {{"target_tokens", target}, {"logprobs", std::vector<double>(in.size(), -2.0)},
                                            {"advantages", std::vector<double>(in.size(), 1.0)}});
  TinkerClient::Raw ppo_post = c.post_bytes(
      "forward_backward", proto::forward_backward(id, 5, {ppo}, "ppo", {{"clip_low_threshold", 0.5}}, true), pb);
  ASSERT_EQ(ppo_post.status, 200) << ppo_post.body;
  double ppo_loss = 0;
  fbo_logprobs(c.wait_accepting(json::parse(ppo_post.body)["request_id"], pb), &ppo_loss);
  EXPECT_TRUE(std::isfinite(ppo_loss));

  // sample and compute_logprobs: JSON posts, SampleResponse results equal to the JSON ones.
  const std::string saved = c.call("save_weights_for_sampler", {{"model_id", id}, {"path", "pb"}, {"seq_id", 6}})["path"];
  const json sample_req = {{"model_path", saved}, {"prompt", {{"chunks", {{{"tokens", {1, 2, 3}}}}}}}, {"num_samples", 3},
                           {"sampling_params", {{"max_tokens", 4}, {"seed", 17}}}};
  Reply sp = c.post("asample", sample_req);
  const proto::Fields sr = proto::parse(c.wait_accepting(sp.body["request_id"], pb).body);
  const json sj = c.call("asample", sample_req);
  const std::vector<std::string> seqs = sr.all(1);
  ASSERT_EQ(seqs.size(), 3u);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const proto::Fields s = proto::parse(seqs[i]);
    EXPECT_EQ(s.number(1), sj["sequences"][i]["stop_reason"] == "length" ? 1u : 0u);
    const std::vector<int32_t> tokens = proto::values<int32_t>(s.one(2));
    EXPECT_EQ(std::vector<int64_t>(tokens.begin(), tokens.end()), sj["sequences"][i]["tokens"].get<std::vector<int64_t>>());
    const std::vector<float> slp = proto::values<float>(s.one(3));
    ASSERT_EQ(slp.size(), tokens.size());
    for (size_t k = 0; k < slp.size(); ++k) EXPECT_EQ(slp[k], float(sj["sequences"][i]["logprobs"][k].get<double>()));
  }
  EXPECT_FALSE(sr.has(2));  // prompt_logprobs: not asked for
  json lp_req = {{"model_path", saved}, {"prompt", {{"chunks", {{{"tokens", {4, 5, 6}}}}}}}, {"num_samples", 1},
                 {"prompt_logprobs", true}, {"sampling_params", {{"max_tokens", 1}}}};
  const proto::Fields lpr = proto::parse(c.wait_accepting(c.post("asample", lp_req).body["request_id"], pb).body);
  const std::vector<float> prompt_lp = proto::values<float>(lpr.one(2));
  ASSERT_EQ(prompt_lp.size(), 3u);
  EXPECT_TRUE(std::isnan(prompt_lp[0]));  // the SDK's None
  EXPECT_LT(prompt_lp[1], 0);

  // Refusals stay JSON with the field named: a malformed body, a protobuf body elsewhere,
  // a compressed body.
  TinkerClient::Raw bad = c.post_bytes("forward_backward", std::string("\x0a\x07model"), pb);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(json::parse(bad.body)["error"].get<std::string>().find("ForwardBackwardRequest.model_id"), std::string::npos)
      << bad.body;
  TinkerClient::Raw elsewhere = c.post_bytes("optim_step", "\x0a\x01m", pb);
  EXPECT_EQ(elsewhere.status, 415) << elsewhere.body;
  TinkerClient::Raw zstd = c.post_bytes("forward_backward", "(\xb5/\xfd", pb, pb, {{"Content-Encoding", "zstd"}});
  EXPECT_EQ(zstd.status, 415) << zstd.body;
  EXPECT_NE(zstd.body.find("proto_compress_fwdbwd"), std::string::npos) << zstd.body;
  c.call("unload_model", {{"model_id", id}});
}

TEST_F(Service, TrainMlpAndTrainAttnChooseTheAdaptedProjections) {
  TinkerClient c(server_->port, kAlice);
  const std::string session = c.session();
  auto targets = [&](bool mlp, bool attn) {
    json res = c.call("create_model", {{"session_id", session}, {"model_seq_id", 0}, {"base_model", base(c)},
                                       {"lora_config", {{"rank", 2}, {"train_mlp", mlp}, {"train_attn", attn}, {"train_unembed", false}}}});
    const std::string id = res.at("model_id");
    const std::string path = c.call("save_weights_for_sampler", {{"model_id", id}, {"path", "t"}})["path"];
    json info = c.post("weights_info", {{"tinker_path", path}}).body;
    EXPECT_EQ(info["train_mlp"], mlp);
    EXPECT_EQ(info["train_attn"], attn);
    json cfg = glint::read_json_file(*dir_ + "/state/runs/" + id + "/sampler_weights/t/adapter_config.json");
    c.call("unload_model", {{"model_id", id}});
    std::set<std::string> t;
    for (const auto& m : cfg["target_modules"]) t.insert(m);
    for (const auto& p : cfg.value("target_parameters", json::array())) {  // PEFT's "mlp.experts.down_proj"
      const std::string name = p;
      t.insert("experts." + name.substr(name.rfind('.') + 1));
    }
    return t;
  };
  // The tiny model: attention q/k/v/o, a dense MLP in layer 1, experts in layer 0.
  EXPECT_EQ(targets(true, false), (std::set<std::string>{"gate_proj", "up_proj", "down_proj", "experts.gate_up_proj",
                                                         "experts.down_proj"}));
  EXPECT_EQ(targets(false, true), (std::set<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}));
  Reply none = c.post("create_model", {{"session_id", session}, {"model_seq_id", 0}, {"base_model", base(c)},
                                       {"lora_config", {{"rank", 2}, {"train_mlp", false}, {"train_attn", false}}}});
  EXPECT_EQ(none.status, 400) << none.body.dump();
}

TEST_F(Service, EachLossThroughTheServiceAgainstAHandComputedValue) {
  TinkerClient c(server_->port, kAlice);
  const std::string session = c.session();
  const std::string id = c.create_model(session, base(c), 2, 5);
  // The model's own log-probabilities of the targets, from a cross-entropy forward.
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9};
  json f = c.call("forward", {{"model_id", id}, {"forward_input", {{"data", {ce_datum(ids, 1.0)}}, {"loss_fn", "cross_entropy"}}}});
  std::vector<double> lp = f["loss_fn_outputs"][0]["logprobs"]["data"];
  const size_t n = lp.size();
  std::vector<double> q(n), adv(n), w(n);
  for (size_t i = 0; i < n; ++i) {
    q[i] = lp[i] + 0.15 * (double(i) - 2.0);  // ratios on both sides of the clip range
    adv[i] = (i % 2 ? -1.0 : 1.0) * (0.5 + 0.25 * double(i));
    w[i] = 0.5 * double(i) - 0.4;
  }
  json td_int = {{"data", std::vector<int64_t>(ids.begin() + 1, ids.end())}, {"dtype", "int64"}};
  auto datum = [&](bool rl) {
    json in = {{"target_tokens", td_int}};
    if (rl) {
      in["logprobs"] = {{"data", q}, {"dtype", "float32"}};
      in["advantages"] = {{"data", adv}, {"dtype", "float32"}};
    } else {
      in["weights"] = {{"data", w}, {"dtype", "float32"}};
    }
    return json{{"model_input", {{"chunks", {{{"tokens", std::vector<int64_t>(ids.begin(), ids.end() - 1)}}}}}},
                {"loss_fn_inputs", in}};
  };
  auto loss_of = [&](const std::string& name, json cfg) {
    json input = {{"data", {datum(name != "cross_entropy")}}, {"loss_fn", name}};
    if (!cfg.is_null()) input["loss_fn_config"] = cfg;
    json r = c.call("forward", {{"model_id", id}, {"forward_input", input}});
    EXPECT_TRUE(r.contains("metrics")) << r.dump();
    return r["metrics"]["loss:sum"].get<double>();
  };
  auto clamp = [](double x, double lo, double hi) { return std::min(std::max(x, lo), hi); };
  double ce = 0, is = 0, ppo = 0, cispo = 0, dro = 0;
  for (size_t i = 0; i < n; ++i) {
    const double r = std::exp(lp[i] - q[i]);
    ce += -lp[i] * w[i];
    is += -r * adv[i];
    ppo += -std::min(r * adv[i], clamp(r, 0.8, 1.2) * adv[i]);
    cispo += -clamp(r, 0.0, 4.0) * lp[i] * adv[i];
    dro += -(lp[i] * adv[i] - 0.1 / 2 * (lp[i] - q[i]) * (lp[i] - q[i]));
  }
  EXPECT_NEAR(loss_of("cross_entropy", nullptr), ce, 1e-9);
  EXPECT_NEAR(loss_of("importance_sampling", nullptr), is, 1e-9);
  EXPECT_NEAR(loss_of("ppo", nullptr), ppo, 1e-9);
  EXPECT_NEAR(loss_of("cispo", nullptr), cispo, 1e-9);
  EXPECT_NEAR(loss_of("dro", {{"beta", 0.1}}), dro, 1e-9);
  EXPECT_EQ(c.call("unload_model", {{"model_id", id}})["type"], "unload_model");
}

TEST_F(Service, ErrorsNameTheFieldWithTheirStatusAndCategory) {
  TinkerClient c(server_->port, kAlice);
  const std::string session = c.session();
  const std::string id = c.create_model(session, base(c), 2, 1);
  auto expect = [](const Reply& r, int status, const std::string& word) {
    EXPECT_EQ(r.status, status) << r.body.dump();
    EXPECT_EQ(r.body.value("category", ""), "user") << r.body.dump();
    EXPECT_NE(r.body.value("error", "").find(word), std::string::npos) << r.body.dump();
  };
  expect(c.post_raw("forward", "{not json"), 400, "not JSON");
  expect(c.post_raw("forward", "[1,2]"), 400, "object");
  expect(c.post("forward_backward", {{"model_id", id}}), 400, "forward_backward_input");
  expect(c.post("forward_backward", forward_body(id, {ce_datum({1, 99, 3}, 1)})), 400, "token id 99");
  expect(c.post("forward_backward", forward_body(id, {ce_datum({1, 2, 3}, 1)}, "dpo")), 400, "dpo");
  expect(c.post("forward_backward", forward_body(id, {ce_datum({1, 2, 3}, 1)}, "dro")), 400, "beta");
  json short_weights = ce_datum({1, 2, 3, 4}, 1.0);
  short_weights["loss_fn_inputs"]["weights"]["data"] = {1.0};
  expect(c.post("forward_backward", forward_body(id, {short_weights})), 400, "loss_fn_inputs.weights");
  json image = ce_datum({1, 2, 3}, 1.0);
  image["model_input"]["chunks"][0]["type"] = "image";
  expect(c.post("forward_backward", forward_body(id, {image})), 400, "image");
  expect(c.post("optim_step", {{"model_id", id}, {"adam_params", {{"beta1", 1.5}}}}), 400, "beta1");
  expect(c.post("optim_step", {{"model_id", id}, {"adam_params", {{"learning_rate", "fast"}}}}), 400, "learning_rate");
  expect(c.post("create_model", {{"session_id", session}, {"model_seq_id", 1}, {"base_model", "other/model"},
                                 {"lora_config", {{"rank", 2}}}}),
         400, "other/model");
  expect(c.post("create_model", {{"session_id", session}, {"model_seq_id", 1}, {"base_model", base(c)},
                                 {"lora_config", {{"rank", 1000}}}}),
         400, "rank");
  expect(c.post("asample", {{"base_model", base(c)}, {"prompt", {{"chunks", {{{"tokens", {1}}}}}}},
                            {"sampling_params", {{"stop", "end"}}}}),
         400, "tokenizer");
  expect(c.post("asample", {{"base_model", base(c)}, {"prompt", {{"chunks", {{{"tokens", {1}}}}}}},
                            {"sampling_params", json::object()}, {"topk_prompt_logprobs", 3}}),
         400, "topk_prompt_logprobs");
  expect(c.post("retrieve_future", {{"request_id", "req-0000000000000000"}}), 404, "req-");
  expect(c.get("no_such_route"), 404, "no route");
  // The body limit: 413 before the body is read.
  Reply big = c.post_raw("forward", std::string(2 << 20, ' '));
  EXPECT_EQ(big.status, 413);
  // More models than the server's three slots: each is taken (the idle ones wait on disk).
  std::vector<std::string> more;
  for (int i = 0; i < 3; ++i) {
    Reply r = c.post("create_model", {{"session_id", session}, {"model_seq_id", 2 + i}, {"base_model", base(c)},
                                      {"lora_config", {{"rank", 2}}}});
    ASSERT_EQ(r.status, 200) << r.body.dump();
    more.push_back(c.wait(r.body).at("model_id"));
  }
  // A failure found while running is the future's error, with its category.
  json s = c.call("save_weights_for_sampler", {{"model_id", id}, {"path", "bad"}});
  ASSERT_TRUE(s.contains("path")) << s.dump();
  std::ofstream(*dir_ + "/state/runs/" + id + "/sampler_weights/bad/adapter_model.safetensors", std::ios::binary)
      << "not safetensors";
  json failed = c.call("asample", {{"model_path", s["path"]}, {"prompt", {{"chunks", {{{"tokens", {1}}}}}}},
                                   {"sampling_params", {{"max_tokens", 2}}}});
  EXPECT_TRUE(failed.contains("error")) << failed.dump();
  EXPECT_EQ(failed.value("category", ""), "user") << failed.dump();
  for (const auto& m : more) c.call("unload_model", {{"model_id", m}});
  c.call("unload_model", {{"model_id", id}});
}

TEST_F(Service, RetriedRequestWithTheSameIdempotencyKeyRunsOnce) {
  TinkerClient c(server_->port, kAlice);
  const std::string session = c.session();
  const std::string once = c.create_model(session, base(c), 2, 3), twice = c.create_model(session, base(c), 2, 3);
  // json::array: clang reads a one-element braced list of a json as a copy, not a list.
  const json data = json::array({ce_datum({1, 2, 3, 4, 5}, 0.25)});
  Reply a = c.post("forward_backward", forward_body(twice, data), "key-1");
  Reply b = c.post("forward_backward", forward_body(twice, data), "key-1");  // the retry
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(a.body, b.body);  // the same future
  c.wait(a.body);
  c.call("forward_backward", forward_body(once, data));
  const double g_twice = c.call("optim_step", {{"model_id", twice}, {"adam_params", json::object()}})["metrics"]["grad_norm:mean"];
  const double g_once = c.call("optim_step", {{"model_id", once}, {"adam_params", json::object()}})["metrics"]["grad_norm:mean"];
  EXPECT_NEAR(g_twice, g_once, 1e-12 * g_once);  // one gradient, not two
  c.call("unload_model", {{"model_id", once}});
  c.call("unload_model", {{"model_id", twice}});
}

TEST_F(Service, AnOwnerSeesAndTouchesOnlyItsOwnObjects) {
  TinkerClient alice(server_->port, kAlice), bob(server_->port, kBob);
  const std::string session = alice.session();
  const std::string id = alice.create_model(session, base(alice), 2, 1);
  json fut = alice.post("forward_backward", forward_body(id, {ce_datum({1, 2, 3}, 1.0)})).body;
  alice.wait(fut);
  const std::string path = alice.call("save_weights", {{"model_id", id}, {"path", "mine"}})["path"];
  const std::string spath = alice.call("save_weights_for_sampler", {{"model_id", id}, {"path", "mine"}})["path"];
  const std::string bob_session = bob.session();
  const std::string bob_model = bob.create_model(bob_session, base(bob), 2, 1);
  json prompt = {{"chunks", {{{"tokens", {1}}}}}};
  // Every one of alice's objects is 404 to bob: read, train, sample, save over, delete.
  std::vector<std::pair<std::string, Reply>> tries = {
      {"get_info", bob.post("get_info", {{"model_id", id}})},
      {"forward", bob.post("forward", {{"model_id", id}, {"forward_input", {{"data", {ce_datum({1, 2}, 1)}}, {"loss_fn", "cross_entropy"}}}})},
      {"forward_backward", bob.post("forward_backward", forward_body(id, {ce_datum({1, 2}, 1)}))},
      {"optim_step", bob.post("optim_step", {{"model_id", id}, {"adam_params", json::object()}})},
      {"save_weights", bob.post("save_weights", {{"model_id", id}, {"path", "mine"}})},
      {"save_weights_for_sampler", bob.post("save_weights_for_sampler", {{"model_id", id}, {"path", "x"}})},
      {"unload_model", bob.post("unload_model", {{"model_id", id}})},
      {"load_weights", bob.post("load_weights", {{"model_id", bob_model}, {"path", path}, {"optimizer", true}})},
      {"create_sampling_session", bob.post("create_sampling_session", {{"session_id", bob_session}, {"sampling_session_seq_id", 0}, {"model_path", spath}})},
      {"asample", bob.post("asample", {{"model_path", spath}, {"prompt", prompt}, {"sampling_params", json::object()}})},
      {"retrieve_future", bob.post("retrieve_future", {{"request_id", fut["request_id"]}})},
      {"weights_info", bob.post("weights_info", {{"tinker_path", path}})},
      {"training_run", bob.get("training_runs/" + id)},
      {"checkpoints", bob.get("training_runs/" + id + "/checkpoints")},
      {"delete", bob.del("training_runs/" + id + "/checkpoints/weights/mine")},
      {"heartbeat", bob.post("session_heartbeat", {{"session_id", session}})},
      {"session", bob.get("sessions/" + session)},
      {"create_model in alice's session", bob.post("create_model", {{"session_id", session}, {"model_seq_id", 9}, {"base_model", base(bob)}, {"lora_config", {{"rank", 2}}}})},
  };
  for (const auto& [what, r] : tries) EXPECT_EQ(r.status, 404) << what << ": " << r.body.dump();
  // Each reply held by name: a range-for over a member of a temporary reply would read
  // the reply after its end (AddressSanitizer: heap-use-after-free).
  const Reply runs = bob.get("training_runs"), checkpoints = bob.get("checkpoints");
  for (const auto& r : runs.body["training_runs"]) EXPECT_NE(r["training_run_id"], id);
  for (const auto& ck : checkpoints.body["checkpoints"])
    EXPECT_EQ(ck["tinker_path"].get<std::string>().find(id), std::string::npos);
  EXPECT_TRUE(fs::exists(*dir_ + "/state/runs/" + id + "/weights/mine/manifest.json"));  // still there
  // Names are path-safe: no traversal, no separators, no hidden names, a length limit.
  for (const std::string& bad : std::vector<std::string>{"../escape", "a/b", ".hidden", std::string(200, 'n'), "a\\b", ""}) {
    Reply r = alice.post("save_weights", {{"model_id", id}, {"path", bad.empty() ? json(nullptr) : json(bad)}});
    if (bad.empty()) {  // no name: one is generated
      EXPECT_EQ(r.status, 200);
      alice.wait(r.body);
      continue;
    }
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body.dump();
  }
  EXPECT_EQ(alice.post("load_weights", {{"model_id", id}, {"path", "tinker://../../etc/weights/x"}, {"optimizer", false}}).status, 400);
  EXPECT_EQ(alice.post("load_weights", {{"model_id", id}, {"path", "tinker://" + id + "/weights/../../x"}, {"optimizer", false}}).status, 400);
  EXPECT_EQ(alice.del("training_runs/" + id + "/checkpoints/weights/..").status, 400);
  EXPECT_FALSE(fs::exists(*dir_ + "/escape"));
  // No key, or an unknown one: 401.
  EXPECT_EQ(TinkerClient(server_->port).get("training_runs").status, 401);
  EXPECT_EQ(TinkerClient(server_->port, "tml-nobody-000000000").get("training_runs").status, 401);
  alice.call("unload_model", {{"model_id", id}});
  bob.call("unload_model", {{"model_id", bob_model}});
}

TEST_F(Service, RequestsOfOneModelRunInSeqIdOrderWhateverTheirArrival) {
  TinkerClient c(server_->port, kAlice);
  const std::string session = c.session();
  const std::string shuffled = c.create_model(session, base(c), 2, 4), ordered = c.create_model(session, base(c), 2, 4);
  const json d1 = ce_datum({1, 2, 3, 4, 5}, 0.25), d2 = ce_datum({5, 4, 3, 2}, 1.0 / 3);
  const json adam = {{"learning_rate", 0.05}};
  // The optimizer step (seq 3) arrives first, then seq 2, then seq 1.
  std::vector<json> futures = {
      c.post("optim_step", {{"model_id", shuffled}, {"seq_id", 3}, {"adam_params", adam}}).body,
      c.post("forward_backward", forward_body(shuffled, {d2}, "cross_entropy", nullptr, 2)).body,
      c.post("forward_backward", forward_body(shuffled, {d1}, "cross_entropy", nullptr, 1)).body};
  c.call("forward_backward", forward_body(ordered, {d1}, "cross_entropy", nullptr, 1));
  c.call("forward_backward", forward_body(ordered, {d2}, "cross_entropy", nullptr, 2));
  const double g = c.call("optim_step", {{"model_id", ordered}, {"seq_id", 3}, {"adam_params", adam}})["metrics"]["grad_norm:mean"];
  EXPECT_NEAR(c.wait(futures[0])["metrics"]["grad_norm:mean"].get<double>(), g, 1e-12 * g);
  c.wait(futures[1]);
  c.wait(futures[2]);
  auto loss = [&](const std::string& id) {
    return c.call("forward", {{"model_id", id}, {"forward_input", {{"data", {d1}}, {"loss_fn", "cross_entropy"}}}})["metrics"]["loss:sum"].get<double>();
  };
  EXPECT_NEAR(loss(shuffled), loss(ordered), 1e-12);
  c.call("unload_model", {{"model_id", shuffled}});
  c.call("unload_model", {{"model_id", ordered}});
}

// Sends raw bytes on a fresh connection and closes it without reading.
void send_and_close(int port, const std::string& bytes) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  ::close(fd);
}

TEST_F(Service, MalformedRequestsAndVanishingClientsLeaveTheServerTraining) {
  TinkerClient c(server_->port, kAlice);
  const std::string session = c.session();
  const std::string id = c.create_model(session, base(c), 2, 8);
  // 100 malformed requests of assorted kinds: each a 4xx.
  std::vector<std::function<Reply()>> kinds = {
      [&] { return c.post_raw("forward_backward", "{\"model_id\": "); },
      [&] { return c.post_raw("optim_step", "\x01\x02\xff"); },
      [&] { return c.post("forward_backward", {{"model_id", 17}}); },
      [&] { return c.post("forward_backward", forward_body(id, {json("a string datum")})); },
      [&] { return c.post("forward_backward", forward_body(id, {ce_datum({1, -4, 2}, 1)})); },
      [&] { return c.post("forward_backward", forward_body(id, {{{"model_input", {{"chunks", 5}}}}})); },
      [&] { return c.post("optim_step", {{"model_id", id}, {"adam_params", {{"eps", -1}}}}); },
      [&] { return c.post("asample", {{"prompt", {{"chunks", json::array()}}}, {"sampling_params", json::object()}}); },
      [&] { return c.post("asample", {{"prompt", {{"chunks", {{{"tokens", {1}}}}}}}, {"num_samples", 0}, {"sampling_params", json::object()}}); },
      [&] { return c.post("load_weights", {{"model_id", id}, {"path", "s3://bucket/x"}, {"optimizer", true}}); },
      [&] { return c.get("training_runs?limit=-3"); },
      [&] { return c.post("create_model", {{"session_id", session}, {"base_model", base(c)}, {"lora_config", {{"rank", "four"}}}}); },
  };
  for (int i = 0; i < 100; ++i) {
    Reply r = kinds[i % kinds.size()]();
    EXPECT_GE(r.status, 400) << i << ": " << r.body.dump();
    EXPECT_LT(r.status, 500) << i << ": " << r.body.dump();
  }
  // Clients that go away mid-request: a body cut short, a header cut short, a long-poll
  // abandoned.
  send_and_close(server_->port, "POST /api/v1/forward_backward HTTP/1.1\r\nHost: x\r\nX-API-Key: " + kAlice +
                                    "\r\nContent-Length: 5000\r\n\r\n{\"model_id\":");
  send_and_close(server_->port, "POST /api/v1/forward_backward HTTP/1.1\r\nHost: x\r\nContent-Le");
  json pending = c.post("forward_backward", forward_body(id, {ce_datum({1, 2, 3, 4}, 1.0)})).body;
  send_and_close(server_->port, "POST /api/v1/retrieve_future HTTP/1.1\r\nHost: x\r\nX-API-Key: " + kAlice +
                                    "\r\nContent-Type: application/json\r\nContent-Length: " +
                                    std::to_string(json({{"request_id", pending["request_id"]}}).dump().size()) + "\r\n\r\n" +
                                    json({{"request_id", pending["request_id"]}}).dump());
  // Still training.
  EXPECT_TRUE(c.wait(pending).contains("metrics"));
  json step = c.call("optim_step", {{"model_id", id}, {"adam_params", {{"learning_rate", 0.01}}}});
  EXPECT_GT(step["metrics"]["grad_norm:mean"].get<double>(), 0) << step.dump();
  EXPECT_EQ(c.get("healthz").status, 200);
  c.call("unload_model", {{"model_id", id}});
}

TEST(ServiceFaults, FuturesAnswerTryAgainWhileTheirCycleWaits) {
  const std::string dir = glint::testing::fresh_temp_dir("serve_try_again");
  const std::string model = glint::testing::make_model(dir);
  ServeProcess server;
  // A 1.5 s cycle window and a 0.2 s long-poll: the first polls must answer try_again.
  server.start_server(dir, "--model " + model + " --state-dir " + dir + "/state --insecure-no-auth --cycle-window-ms 1500 "
                                                                        "--poll-seconds 0.2 --max-pending 3");
  TinkerClient c(server.port);
  const std::string session = c.session();
  Reply fut = c.post("create_model", {{"session_id", session}, {"model_seq_id", 0},
                                      {"base_model", c.base_model()},
                                      {"lora_config", {{"rank", 2}}}});
  ASSERT_EQ(fut.status, 200);
  Reply first = c.post("retrieve_future", {{"request_id", fut.body["request_id"]}});
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, json({{"type", "try_again"}, {"request_id", fut.body["request_id"]}, {"queue_state", "active"}}));
  int retries = 0;
  const json created = c.wait(fut.body, &retries);
  ASSERT_TRUE(created.contains("model_id")) << created.dump();
  EXPECT_GE(retries, 1);
  // --max-pending 3: a fourth queued request is 429 with Retry-After.
  std::vector<json> queued;
  for (int i = 0; i < 3; ++i) {
    Reply r = c.post("forward", {{"model_id", created["model_id"]},
                                 {"forward_input", {{"data", {ce_datum({1, 2, 3}, 1.0)}}, {"loss_fn", "cross_entropy"}}}});
    ASSERT_EQ(r.status, 200) << r.body.dump();
    queued.push_back(r.body);
  }
  Reply over = c.post("forward", {{"model_id", created["model_id"]},
                                  {"forward_input", {{"data", {ce_datum({1, 2, 3}, 1.0)}}, {"loss_fn", "cross_entropy"}}}});
  EXPECT_EQ(over.status, 429) << over.body.dump();
  EXPECT_EQ(over.retry_after, "1");
  for (const auto& q : queued) EXPECT_TRUE(c.wait(q).contains("metrics"));
  EXPECT_EQ(server.stop(), 0) << glint::read_file(server.log);
}

TEST(ServiceFaults, ASilentClientsModelLeavesItsSlotAndContinuesOnItsNextRequest) {
  const std::string dir = glint::testing::fresh_temp_dir("serve_expiry");
  const std::string model = glint::testing::make_model(dir);
  ServeProcess server;
  server.start_server(dir, "--model " + model + " --state-dir " + dir + "/state --insecure-no-auth --session-timeout 2 "
                                                                        "--idle-release 1 --max-tenants 2 --cycle-window-ms 0 "
                                                                        "--dtype float64");
  TinkerClient c(server.port);
  const std::string base = c.base_model();
  const std::string silent = c.session(), alive = c.session();
  const std::string a = c.create_model(silent, base, 2, 1), b = c.create_model(alive, base, 2, 1);
  const json fwd = {{"model_id", a}, {"forward_input", {{"data", {ce_datum({1, 2, 3}, 1.0)}}, {"loss_fn", "cross_entropy"}}}};
  c.call("forward_backward", forward_body(a, {ce_datum({3, 2, 1}, 1.0)}));
  c.call("optim_step", {{"model_id", a}, {"adam_params", {{"learning_rate", 0.05}}}});
  const json before = c.call("forward", fwd);
  for (int i = 0; i < 16; ++i) {  // 4 s: `alive` beats, `silent` does not
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    EXPECT_EQ(c.post("session_heartbeat", {{"session_id", alive}}).status, 200);
  }
  // The silent client's model went to disk, whole; its session ended, and is taken up
  // again when the client comes back.
  const json st = glint::read_json_file(dir + "/state/runs/" + a + "/state.json");
  EXPECT_EQ(st.value("state", ""), "paged") << st.dump();
  EXPECT_EQ(st.value("step", -1), 1) << st.dump();
  const json listed = c.get("sessions").body["sessions"];
  EXPECT_EQ(std::find(listed.begin(), listed.end(), silent), listed.end()) << listed.dump();
  EXPECT_EQ(c.post("session_heartbeat", {{"session_id", silent}}).status, 200);
  EXPECT_EQ(c.post("session_heartbeat", {{"session_id", "session-not-one-of-ours"}}).status, 404);
  // Its next request brings it back as it was; the other model trains on, and new ones
  // take the slots.
  const json after = c.call("forward", fwd);
  EXPECT_EQ(after["loss_fn_outputs"], before["loss_fn_outputs"]);
  EXPECT_TRUE(c.call("forward_backward", forward_body(b, {ce_datum({1, 2, 3}, 1.0)})).contains("metrics"));
  EXPECT_FALSE(c.create_model(alive, base, 2, 2).empty());
  EXPECT_FALSE(c.create_model(alive, base, 2, 3).empty());
  EXPECT_EQ(server.stop(), 0) << glint::read_file(server.log);
}

TEST(ServiceSampling, StopStringsEndASequenceWhereTheirTokensAppear) {
  // A model with a tokenizer: stop strings are tokenized by it.
  const std::string dir = glint::testing::fresh_temp_dir("serve_stop");
  const std::string model = glint::testing::make_model(dir, 32, 16, 280);
  fs::copy_file(std::string(GLINT_TEST_DATA_DIR) + "/tokenizer_fixture/tokenizer.json", model + "/tokenizer.json");
  const glint::Tokenizer tok = glint::Tokenizer::load(model);
  ServeProcess server;
  server.start_server(dir, "--model " + model + " --state-dir " + dir + "/state --insecure-no-auth --cycle-window-ms 0");
  TinkerClient c(server.port);
  const std::string base = c.base_model();
  const json prompt = {{"chunks", {{{"tokens", {5, 40, 77}}}}}};
  auto sample = [&](json params) {
    params["max_tokens"] = 12;
    params["temperature"] = 0.0;
    return c.call("asample", {{"base_model", base}, {"prompt", prompt}, {"sampling_params", params}})["sequences"][0];
  };
  const std::vector<int64_t> free = sample(json::object())["tokens"];
  ASSERT_EQ(free.size(), 12u);
  // A stop string made of a generated token's text: the sequence ends after the first
  // place where the string's tokens appear.
  int checked = 0;
  for (size_t k = 2; k < free.size() && checked < 3; ++k) {
    const std::string text = tok.decode({int32_t(free[k])});
    std::vector<int32_t> enc = tok.encode(text, false);
    if (text.empty() || enc.empty()) continue;
    size_t end = 0;  // one past the first occurrence of enc in free
    for (size_t i = 0; i + enc.size() <= free.size() && !end; ++i)
      if (std::equal(enc.begin(), enc.end(), free.begin() + long(i))) end = i + enc.size();
    if (!end) continue;
    json got = sample({{"stop", text}});
    EXPECT_EQ(got["stop_reason"], "stop") << text;
    EXPECT_EQ(got["tokens"], json(std::vector<int64_t>(free.begin(), free.begin() + long(end)))) << text;
    json listed = sample({{"stop", {"no such text in the vocabulary", text}}});
    EXPECT_EQ(listed["tokens"], got["tokens"]);
    ++checked;
  }
  EXPECT_GT(checked, 0);
  EXPECT_EQ(server.stop(), 0) << glint::read_file(server.log);
}

TEST(ServiceFaults, ServerStartsOnlyWithKeysOrLoopbackWithoutThem) {
  const std::string dir = glint::testing::fresh_temp_dir("serve_refuse");
  const std::string model = glint::testing::make_model(dir);
  auto run = [&](const std::string& args) { return glint::testing::run_glint("serve --model " + model + " --state-dir " + dir + "/s " + args); };
  glint::testing::RunResult none = run("");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("--api-keys"), std::string::npos) << none.output;
  glint::testing::RunResult open = run("--insecure-no-auth --host 0.0.0.0");
  EXPECT_NE(open.exit_code, 0);
  EXPECT_NE(open.output.find("loopback"), std::string::npos) << open.output;
  std::ofstream(dir + "/keys") << "abc-123456789012 someone\n";
  glint::testing::RunResult bad = run("--api-keys " + dir + "/keys");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("tml-"), std::string::npos) << bad.output;
}

TEST(ServiceFaults, ASecondServerOnAPortInUseIsRefused) {
  const std::string dir = glint::testing::fresh_temp_dir("serve_port");
  const std::string model = glint::testing::make_model(dir);
  ServeProcess first;
  first.start_server(dir, "--model " + model + " --state-dir " + dir + "/a --insecure-no-auth");
  // `timeout`: a second server that did start would otherwise serve until killed.
  glint::testing::RunResult second = glint::testing::run(
      "timeout 60 " + glint::testing::glint_bin() + " serve --model " + model + " --state-dir " + dir +
      "/b --insecure-no-auth --port " + std::to_string(first.port));
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.exit_code, 124) << "the second server started: " << second.output;
  EXPECT_NE(second.output.find("port is in use"), std::string::npos) << second.output;
  // The first one still answers, alone.
  EXPECT_EQ(TinkerClient(first.port).get("healthz").status, 200);
  EXPECT_EQ(first.stop(), 0);
}

TEST(ServiceFaults, KilledWhileSavingRestartsWithEveryCompleteCheckpoint) {
  const std::string dir = glint::testing::fresh_temp_dir("serve_kill");
  const std::string model = glint::testing::make_model(dir, 64, 32);
  const std::string args = "--model " + model + " --state-dir " + dir + "/state --insecure-no-auth --cycle-window-ms 0";
  std::string id;
  std::vector<std::string> sent;
  for (int round = 0; round < 4; ++round) {
    ServeProcess server;
    server.start_server(dir, args);
    TinkerClient c(server.port);
    const std::string session = c.session();
    const std::string base = c.base_model();
    // Whatever survived the last kill is listed, complete and loadable into a new model.
    if (!id.empty()) {
      Reply cks = c.get("training_runs/" + id + "/checkpoints");
      ASSERT_EQ(cks.status, 200) << cks.body.dump();
      EXPECT_GE(cks.body["checkpoints"].size(), 1u);
      std::printf("round %d: %zu complete checkpoints survived the kill\n", round, cks.body["checkpoints"].size());
      const std::string probe = c.create_model(session, base, 4, 1);
      for (const auto& ck : cks.body["checkpoints"]) {
        const std::string path = ck["tinker_path"];
        if (ck["checkpoint_type"] == "training") {
          json l = c.call("load_weights", {{"model_id", probe}, {"path", path}, {"optimizer", true}});
          EXPECT_EQ(l.value("path", ""), path) << l.dump();
        } else {
          json s = c.call("asample", {{"model_path", path}, {"prompt", {{"chunks", {{{"tokens", {1, 2}}}}}}},
                                      {"sampling_params", {{"max_tokens", 2}, {"temperature", 0.0}}}});
          EXPECT_EQ(s["sequences"].size(), 1u) << path << ": " << s.dump();
        }
      }
      for (const auto& e : fs::recursive_directory_iterator(dir + "/state"))  // no half-written leftovers
        EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
      c.call("unload_model", {{"model_id", probe}});
    }
    id = c.create_model(session, base, 4, 2);
    // A run whose model is gone is still listed; the new model saves, and the server is
    // killed at a different point of its saves each round.
    c.call("forward_backward", forward_body(id, {ce_datum({1, 2, 3, 4, 5, 6}, 0.2)}));
    c.call("optim_step", {{"model_id", id}, {"adam_params", {{"learning_rate", 0.01}}}});
    ASSERT_TRUE(c.call("save_weights", {{"model_id", id}, {"path", "whole"}}).contains("path"));
    for (int k = 0; k < 6; ++k) {
      c.post("save_weights", {{"model_id", id}, {"path", "w" + std::to_string(k)}});
      c.post("save_weights_for_sampler", {{"model_id", id}, {"path", "s" + std::to_string(k)}});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + 15 * round));
    server.kill9();
  }
}

// Found by tests/fuzz/service_request_fuzz.cc: a request path that is not UTF-8, echoed
// in the 404's message, made the answer's JSON fail to serialize, and the exception left
// Service::handle. The answer now carries U+FFFD for the bad byte.
TEST(ServiceRequests, APathThatIsNotUtf8IsAnsweredWithJson) {
  glint::ServiceOptions o;
  o.base_model = "tiny";
  o.state_dir = glint::testing::fresh_temp_dir("serve_not_utf8");
  glint::Service service(o);
  glint::HttpRequest req;
  req.method = "GET";
  req.path = "/api/v1/sessions\xce$x";
  glint::HttpResponse r = service.handle(req);
  EXPECT_EQ(r.status, 404);
  json body = json::parse(r.body);
  EXPECT_NE(body["error"].get<std::string>().find("sessions\xef\xbf\xbd$x"), std::string::npos) << r.body;
}

}  // namespace
