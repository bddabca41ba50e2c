// The training service behind `glint serve`: the Tinker API's routes, its owners,
// sessions, models, futures, sampling sessions and checkpoints, and the clock cycles
// that turn queued requests into programs for the ranks (serve/executor.h).
//
// Threads: handle() is called from the HTTP server's threads; next_program() and
// complete() from rank 0's main thread, which runs each program on every rank. One
// mutex guards the state; a future's waiters are woken when its cycle completes.
// Runs and checkpoints live on disk (serve/run_store.h) and outlive the process.
//
// Models and slots: the tenant bank holds max_tenants trained models; any number more
// wait on disk, paged out whole (page_out/page_in operations), and a model's state is
// always in exactly one of the two. A cycle gives a model with runnable work a slot, a
// free one or that of the least recently used idle model, which is paged out first in
// the same program. state.json in each run says where the state is, so that a later
// process continues every model that was on disk. Both wires (JSON, and the protobuf of
// SDK 0.25: serve/wire.h) meet in route(): a request is JSON from there on.
#pragma once

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "serve/run_store.h"

namespace glint {

struct ServiceOptions {
  std::string base_model;  // the name clients create models of (capabilities)
  std::string state_dir;
  std::map<std::string, std::string> api_keys;  // key -> owner; empty: every request is "local"
  int64_t max_tenants = 8;      // trained models in slots at once (the others wait on disk)
  int64_t max_rank = 32;
  int64_t sampler_slots = 4;    // sampler adapters kept loaded (least recently used leaves)
  double cycle_window = 0.02;   // seconds a cycle waits for more requests once one came
  double poll_seconds = 20;     // retrieve_future waits this long before try_again
  double session_timeout = 300; // a session without heartbeat this long ends (its models stay)
  double idle_release = 60;     // a model whose client was silent this long leaves its slot for disk
  double seq_wait = 2;          // a model's request waits this long for an earlier seq_id
  double preempt_after = 1;     // a model waiting this long for a slot takes a busy model's
  int64_t max_pending = 256;    // queued requests per owner before 429
  int64_t vocab_size = 0;
  int64_t max_positions = 0;
  std::vector<std::string> lora_targets;  // the family's LoRA target names
  // Tokenizes a stop string (null: stop strings are refused; token ids still work).
  std::function<std::vector<int64_t>(const std::string&)> encode;
  // One line per answered request: owner, method and route, status, milliseconds (null:
  // none). Never the key or the body.
  std::function<void(const std::string&)> access_log;
  // Events an operator wants to know of: a model revived from disk, a failed page-out.
  std::function<void(const std::string&)> log;
};

struct HttpRequest {
  std::string method, path;  // path without the query
  std::map<std::string, std::string> query;
  std::string api_key, idempotency_key, body;
  std::string content_type, content_encoding, accept;  // the headers, as sent ("" when absent)
};

struct HttpResponse {
  int status = 200;
  std::string body;
  std::map<std::string, std::string> headers;
  std::string content_type = "application/json";
};

class Service {
 public:
  explicit Service(ServiceOptions options);
  ~Service();
  HttpResponse handle(const HttpRequest& request);

  // The next cycle's program ({"ops": [...]}, perhaps none), waiting up to max_wait
  // seconds for work. After stop(): the last one, {"ops": [the page-outs of every model
  // in a slot], "shutdown": true}, to be run and completed like the others.
  nlohmann::json next_program(double max_wait);
  // The results of the program next_program() gave last, one per operation.
  void complete(const nlohmann::json& results);
  void stop();

 private:
  struct Pending;
  struct Model;
  struct Future;
  struct Session;
  struct SamplingSession;
  // The model and seq_id a request names, known before the rest of it is checked.
  struct RequestHead {
    std::string model_id;
    int64_t seq = -1;
  };
  HttpResponse answer(const HttpRequest& request, std::string* owner);
  HttpResponse route(const HttpRequest& request, const std::string& owner, RequestHead* head);
  HttpResponse enqueue(const std::string& owner, const std::string& model_id, Pending pending);
  HttpResponse retrieve(const std::string& owner, const nlohmann::json& body, bool protobuf);
  // A refused request's seq_id is spent: the model's later requests do not wait for it.
  void spend_seq(const std::string& owner, const RequestHead& head);
  std::string new_id(const char* prefix);
  // The directory of a checkpoint `owner` owns, named by a tinker:// path (*out: its
  // parts). A malformed path throws glint::Error (400); one that does not exist or is
  // another owner's answers 404.
  std::string owned_checkpoint(const std::string& owner, const std::string& path, RunStore::Path* out);
  void expire_sessions();
  Session& session_of(const std::string& owner, const std::string& id);
  // A model of an earlier process, from its run on disk: true when it was added to
  // models_; false when `owner` has no such run; throws ClientError (410) when its state
  // was lost, saying how to continue.
  bool revive(const std::string& owner, const std::string& id);
  void mark_changed(const std::string& id);
  void unloaded(const std::string& id);
  // *op: the operation that pages model `id` out; returns what its result does.
  std::function<void(const nlohmann::json&)> page_out(const std::string& id, nlohmann::json* op);
  void finish(const std::string& request_id, nlohmann::json response);
  nlohmann::json lora_json(const nlohmann::json& lora_config, const std::string& where) const;

  ServiceOptions opt_;
  RunStore store_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  bool stopping_ = false;
  std::mt19937_64 rng_;
  std::map<std::string, Session> sessions_;
  std::map<std::string, Model> models_;
  std::vector<std::string> model_order_;  // creation order: the order of their cycle work
  std::map<std::string, Future> futures_;
  std::map<std::string, SamplingSession> sampling_;
  std::deque<Pending> samples_;          // queued asample requests
  // owner + route + key -> the first answer (nullopt: still being handled)
  std::map<std::string, std::optional<HttpResponse>> idempotent_;
  std::deque<std::string> idempotent_order_;
  std::map<std::string, int64_t> pending_count_;   // per owner
  // Sampler adapters loaded into the bank: tinker path -> tenant name, and their use.
  std::map<std::string, std::string> resident_;
  std::map<std::string, uint64_t> last_use_;
  std::vector<std::string> evicted_;  // sampler tenants to remove in the next cycle
  uint64_t use_clock_ = 0;
  int64_t sampler_counter_ = 0;
  // The program in flight: per operation, what its result does to the futures it answers.
  std::vector<std::function<void(const nlohmann::json&)>> in_flight_done_;
};

}  // namespace glint
