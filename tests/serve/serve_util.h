// A glint serve process for the service tests (started alone or under glint launch,
// on a free port, stopped with SIGTERM) and a Tinker API client written from the SDK's
// request shapes (v0.16.1: JSON, defaults omitted).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/fs.h"
#include "dist/tiny_run.h"

namespace glint::testing {

// Two owners' API keys, for the tests' --api-keys files.
inline const std::string kAlice = "tml-alice-0123456789", kBob = "tml-bob-0123456789";

struct ServeProcess {
  pid_t pid = -1;
  int port = 0;
  std::string log;

  // `args` after "serve"; ranks > 1 runs it under glint launch. Waits until it listens.
  void start_server(const std::string& dir, const std::string& args, int ranks = 1) {
    const std::string port_file = dir + "/port";
    std::filesystem::remove(port_file);
    log = dir + "/serve.log";
    const std::string serve = glint_bin() + " serve --port 0 --port-file " + port_file + " " + args;
    pid = start("GLINT_DIST_TIMEOUT_SECONDS=60 " +
                    (ranks > 1 ? glint_bin() + " launch -n " + std::to_string(ranks) + " -- " + serve : serve),
                log);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!path_exists(port_file) && std::chrono::steady_clock::now() < deadline) {
      int status;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        FAIL() << "glint serve exited: " << read_file(log);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(path_exists(port_file)) << read_file(log);
    port = std::stoi(read_file(port_file));
  }
  // SIGTERM and the exit status (-1: still running after `seconds`, then SIGKILLed).
  int stop(double seconds = 60) {
    if (pid < 0) return 0;
    ::kill(pid, SIGTERM);
    int code = wait_for(pid, seconds);
    if (code < 0) {
      ::kill(pid, SIGKILL);
      wait_for(pid, 10);
    }
    pid = -1;
    return code;
  }
  void kill9() {
    if (pid < 0) return;
    ::kill(pid, SIGKILL);
    wait_for(pid, 30);
    pid = -1;
  }
  ~ServeProcess() { stop(10); }
};

struct Reply {
  int status = 0;
  nlohmann::json body;
  std::string retry_after;
};

class TinkerClient {
 public:
  TinkerClient(int port, std::string key = "") : http_("127.0.0.1", port), key_(std::move(key)) {
    http_.set_read_timeout(120, 0);
  }
  Reply post(const std::string& route, const nlohmann::json& body, const std::string& idempotency = "") {
    httplib::Headers h;
    if (!key_.empty()) h.emplace("X-API-Key", key_);
    if (!idempotency.empty()) h.emplace("X-Idempotency-Key", idempotency);
    return reply(http_.Post(("/api/v1/" + route).c_str(), h, body.dump(), "application/json"));
  }
  Reply post_raw(const std::string& route, const std::string& body) {
    httplib::Headers h;
    if (!key_.empty()) h.emplace("X-API-Key", key_);
    return reply(http_.Post(("/api/v1/" + route).c_str(), h, body, "application/json"));
  }
  // A body of any type, and the answer as it came: status, bytes, Content-Type.
  struct Raw {
    int status = 0;
    std::string body, content_type;
  };
  Raw post_bytes(const std::string& route, const std::string& body, const std::string& content_type,
                 const std::string& accept = "application/json", const httplib::Headers& extra = {}) {
    httplib::Headers h = extra;
    if (!key_.empty()) h.emplace("X-API-Key", key_);
    h.emplace("Accept", accept);
    Raw r;
    auto res = http_.Post(("/api/v1/" + route).c_str(), h, body, content_type.c_str());
    if (!res) return r;
    r.status = res->status;
    r.body = res->body;
    r.content_type = res->get_header_value("Content-Type");
    return r;
  }
  // Polls a future as SDK 0.25 does for results it reads as protobuf (Accept:
  // application/x-protobuf only) until it is not try_again.
  Raw wait_accepting(const std::string& request_id, const std::string& accept) {
    for (int i = 0; i < 100000; ++i) {
      Raw r = post_bytes("retrieve_future", nlohmann::json({{"request_id", request_id}, {"allow_metadata_only", true}}).dump(),
                         "application/json", accept);
      if (r.status == 200 && r.content_type.find("json") != std::string::npos &&
          nlohmann::json::parse(r.body, nullptr, false).value("type", "") == "try_again")
        continue;
      return r;
    }
    ADD_FAILURE() << "future never finished";
    return {};
  }
  Reply get(const std::string& route) {
    httplib::Headers h;
    if (!key_.empty()) h.emplace("X-API-Key", key_);
    return reply(http_.Get(("/api/v1/" + route).c_str(), h));
  }
  Reply del(const std::string& route) {
    httplib::Headers h;
    if (!key_.empty()) h.emplace("X-API-Key", key_);
    return reply(http_.Delete(("/api/v1/" + route).c_str(), h));
  }
  // Polls retrieve_future as the SDK does (try_again: at once) until the result; counts
  // the try_again answers in *retries when given.
  nlohmann::json wait(const nlohmann::json& future, int* retries = nullptr) {
    for (int i = 0; i < 100000; ++i) {
      Reply r = post("retrieve_future", {{"request_id", future.at("request_id")}});
      EXPECT_EQ(r.status, 200) << r.body.dump();
      if (r.status != 200) return r.body;
      if (r.body.value("type", "") == "try_again") {
        EXPECT_EQ(r.body.at("request_id"), future.at("request_id"));
        if (retries) ++*retries;
        continue;
      }
      return r.body;
    }
    ADD_FAILURE() << "future never finished";
    return {};
  }
  // A request that returns a future, and its result.
  nlohmann::json call(const std::string& route, const nlohmann::json& body) {
    Reply r = post(route, body);
    EXPECT_EQ(r.status, 200) << route << ": " << r.body.dump();
    if (r.status != 200) return r.body;
    return wait(r.body);
  }
  // The served base model's name (get_server_capabilities).
  std::string base_model() { return get("get_server_capabilities").body["supported_models"][0]["model_name"]; }
  std::string session() {
    Reply r = post("create_session", {{"tags", nlohmann::json::array()}, {"user_metadata", nullptr}, {"sdk_version", "0.16.1"}});
    EXPECT_EQ(r.status, 200) << r.body.dump();
    return r.body.value("session_id", "");
  }
  std::string create_model(const std::string& session, const std::string& base, int rank, int seed) {
    nlohmann::json res = call("create_model", {{"session_id", session}, {"model_seq_id", 0}, {"base_model", base},
                                               {"lora_config", {{"rank", rank}, {"seed", seed}}}});
    return res.value("model_id", "");
  }

 private:
  static Reply reply(const httplib::Result& res) {
    Reply r;
    if (!res) return r;
    r.status = res->status;
    r.retry_after = res->get_header_value("Retry-After");
    r.body = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    return r;
  }
  httplib::Client http_;
  std::string key_;
};

// A cross-entropy Datum from a whole sequence: input ids[:-1], targets ids[1:], each
// target weighted `weight`.
inline nlohmann::json ce_datum(const std::vector<int64_t>& ids, double weight) {
  std::vector<int64_t> in(ids.begin(), ids.end() - 1), target(ids.begin() + 1, ids.end());
  std::vector<double> w(target.size(), weight);
  return {{"model_input", {{"chunks", {{{"tokens", in}}}}}},
          {"loss_fn_inputs", {{"target_tokens", {{"data", target}, {"dtype", "int64"}}},
                              {"weights", {{"data", w}, {"dtype", "float32"}}}}}};
}

}  // namespace glint::testing
