#include "serve/service.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "core/fs.h"
#include "lora/lora.h"
#include "lora/peft_io.h"
#include "model/adaptable.h"
#include "serve/losses.h"
#include "serve/protocol.h"
#include "serve/wire.h"
#include "train/optimizer.h"

namespace glint {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

// A client's mistake: answered with `status` and the message (category "user").
struct ClientError : std::runtime_error {
  ClientError(int status, const std::string& what) : std::runtime_error(what), status(status) {}
  int status;
};

// The body of an answer. Strings in it may hold bytes of the request that are not UTF-8
// (a path echoed in an error): those become U+FFFD instead of failing the answer.
std::string body_text(const json& body) { return body.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse reply(const json& body, int status = 200) { return {status, body_text(body), {}}; }
HttpResponse error_reply(int status, const std::string& message) {
  return {status, body_text(json{{"error", message}, {"category", "user"}}), {}};
}

bool says_protobuf(const std::string& header) { return header.find(tinker::kProtobufType) != std::string::npos; }

// "0.25.1" > "0.25" >= "0.25.0": the SDK's version as numbers (unreadable: 0).
std::vector<int> version_numbers(const std::string& v) {
  std::vector<int> out;
  size_t i = 0;
  while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) {
    int n = 0;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i])) && n < 100000) n = n * 10 + (v[i++] - '0');
    out.push_back(n);
    if (i < v.size() && v[i] == '.') ++i;
    else break;
  }
  return out;
}

// A refusal a client does not retry: the request's seq_id is spent. (408, 409, 429 and
// 5xx are retried by the SDK with the same seq_id.)
bool final_refusal(int status) { return status >= 400 && status < 500 && status != 408 && status != 409 && status != 429; }

// A cycle's operations run in phases: models paged out (0) before others take their
// slots (1: created, paged in, loaded), then forward passes (2), updates (3), saves (4),
// sampling (5), unloads (6). A model's requests keep their order across the phases.
constexpr int kPhases = 7;
int phase_of(const std::string& kind) {
  if (kind == "create" || kind == "load") return 1;
  if (kind == "forward" || kind == "forward_backward") return 2;
  if (kind == "optim") return 3;
  if (kind == "save" || kind == "save_sampler") return 4;
  return 6;  // unload
}

}  // namespace

struct Service::Pending {
  std::string request_id, owner, kind;
  int64_t seq = -1;
  json op;  // the executor operation (forward: the item)
  // What complete() needs. Every kind has every field (empty where it has no use), so
  // no code reading a queue of mixed kinds meets a field that is not there.
  std::string dir;      // save*: the checkpoint's directory; sample: its adapter's
  std::string partial;  // save*: where it is written before the rename ("" for the others)
  std::string path;     // save*, load, sample: the tinker:// path
  std::string session;  // save_sampler: the session a session-only sampler joins
  bool session_only = false;
  Clock::time_point arrived = Clock::now();
};

struct Service::Model {
  std::string owner, session;
  json lora;  // {r, alpha, target_modules, target_parameters, train_mlp, train_attn, train_unembed}
  uint64_t seed = 0;
  bool unloaded = false;
  // Its state is in a slot of the tenant bank (resident), or in `paged` on disk, or
  // neither while its creation is queued.
  bool resident = false;
  std::string paged;     // the newest page_out directory ("" when none)
  bool changed = false;  // trained since it was created or paged in
  int64_t step = 0;      // optimizer steps taken
  uint64_t last_use = 0;
  Clock::time_point last_request = Clock::now();
  std::string message;   // said with the next request's answer (how a revived model continues)
  std::deque<Pending> queue;
  int64_t next_seq = 1;
  std::set<int64_t> refused;  // seq_ids of refused requests: spent, never waited for
};

struct Service::Future {
  std::string owner;
  // The protobuf message a successful result has on the 0.19+ wire: "ForwardBackwardOutput",
  // "SampleResponse", or "" (JSON only).
  std::string message;
  bool done = false;
  json response;
  Clock::time_point finished;
};

struct Service::Session {
  std::string owner;
  Clock::time_point seen = Clock::now();
  std::vector<std::string> models, samplers;
};

struct Service::SamplingSession {
  std::string owner, session;
  std::string path;  // tinker path of its adapter ("" = the base model)
  std::string dir;
};

Service::Service(ServiceOptions options)
    : opt_(std::move(options)), store_(opt_.state_dir), rng_(std::random_device{}()) {}

Service::~Service() { stop(); }

void Service::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  work_cv_.notify_all();
  done_cv_.notify_all();
}

std::string Service::new_id(const char* prefix) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, (unsigned long long)rng_());
  return buf;
}

HttpResponse Service::handle(const HttpRequest& req) {
  const auto started = Clock::now();
  std::string owner = "-";
  HttpResponse r = answer(req, &owner);
  if (opt_.access_log) {
    char line[96];
    std::snprintf(line, sizeof line, " %d %.1f ms", r.status,
                  std::chrono::duration<double, std::milli>(Clock::now() - started).count());
    // The path may hold any bytes a client sent: only printable ASCII reaches the log.
    std::string path;
    for (char c : req.method + " " + req.path) path += (c >= 0x20 && c < 0x7f) ? c : '?';
    opt_.access_log(owner + " " + path + line);
  }
  return r;
}

HttpResponse Service::answer(const HttpRequest& req, std::string* owner_out) {
  // Health checks come from load balancers, which hold no key.
  if (req.method == "GET" && (req.path == "/api/v1/healthz" || req.path == "/healthz")) return reply({{"status", "ok"}});
  std::string owner = "local";
  if (!opt_.api_keys.empty()) {
    auto it = opt_.api_keys.find(req.api_key);
    if (req.api_key.empty()) return error_reply(401, "no X-API-Key header");
    if (it == opt_.api_keys.end()) return error_reply(401, "unknown API key");
    owner = it->second;
  }
  *owner_out = owner;
  // A retry of a request that changed something gets the first answer. retrieve_future
  // only reads: each poll is answered afresh.
  const std::string idem = req.method != "GET" && !req.idempotency_key.empty() && req.path != "/api/v1/retrieve_future"
                               ? owner + "\n" + req.method + " " + req.path + "\n" + req.idempotency_key
                               : "";
  if (!idem.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idempotent_.find(idem);
    if (it != idempotent_.end()) {
      if (!it->second) return error_reply(409, "the first request with this X-Idempotency-Key is still being handled");
      return *it->second;  // a retry: the first answer
    }
    idempotent_[idem] = std::nullopt;  // in progress: a concurrent retry waits for it
  }
  HttpResponse r;
  RequestHead head;
  try {
    r = route(req, owner, &head);
  } catch (const ClientError& e) {
    r = error_reply(e.status, e.what());
    if (e.status == 429) r.headers["Retry-After"] = "1";
  } catch (const json::exception& e) {
    r = error_reply(400, std::string("malformed request: ") + e.what());
  } catch (const Error& e) {
    r = error_reply(400, e.what());
  } catch (const std::exception& e) {
    r = {500, body_text(json{{"error", e.what()}, {"category", "server"}}), {}};
  }
  if (final_refusal(r.status) && head.seq > 0 && !head.model_id.empty()) spend_seq(owner, head);
  if (!idem.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (r.status != 200) {  // not done: a retry runs it again
      idempotent_.erase(idem);
      return r;
    }
    idempotent_[idem] = r;
    idempotent_order_.push_back(idem);
    while (idempotent_order_.size() > 100000) {
      idempotent_.erase(idempotent_order_.front());
      idempotent_order_.pop_front();
    }
  }
  return r;
}

void Service::spend_seq(const std::string& owner, const RequestHead& head) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(head.model_id);
  if (it == models_.end() || it->second.owner != owner || head.seq < it->second.next_seq) return;
  it->second.refused.insert(head.seq);
  work_cv_.notify_all();  // a request waiting for this seq_id goes on
}

json Service::lora_json(const json& cfg, const std::string& where) const {
  const int64_t r = tinker::integer(cfg, "rank", where);
  if (r < 1 || r > opt_.max_rank)
    throw ClientError(400, where + ".rank: " + std::to_string(r) + " is outside [1, " + std::to_string(opt_.max_rank) +
                               "] (the server's --max-rank)");
  const bool mlp = tinker::boolean(cfg, "train_mlp", where, true);
  const bool attn = tinker::boolean(cfg, "train_attn", where, true);
  const bool unembed = tinker::boolean(cfg, "train_unembed", where, true);
  json modules = json::array(), params = json::array();
  for (const std::string& t : opt_.lora_targets) {
    const std::string parameter = expert_target_parameter(t);
    const bool expert = !parameter.empty();
    const bool is_mlp = expert || t == "gate_proj" || t == "up_proj" || t == "down_proj";
    if (is_mlp ? !mlp : !attn) continue;
    if (expert) params.push_back(parameter);
    else modules.push_back(t);
  }
  if (modules.empty() && params.empty()) throw ClientError(400, where + ": train_mlp and train_attn are both false: nothing to train");
  // The output head is not adapted by glint: train_unembed is reported as false.
  (void)unembed;
  // alpha = 2r, the ratio glint train uses by default.
  return {{"r", r}, {"alpha", 2.0 * double(r)}, {"target_modules", modules}, {"target_parameters", params},
          {"train_mlp", mlp}, {"train_attn", attn}, {"train_unembed", false}};
}

HttpResponse Service::enqueue(const std::string& owner, const std::string& model_id, Pending p) {
  // The caller holds mu_.
  if (pending_count_[owner] >= opt_.max_pending)
    throw ClientError(429, "too many queued requests (" + std::to_string(opt_.max_pending) + "); retry later");
  p.request_id = new_id("req-");
  p.owner = owner;
  Future& f = futures_[p.request_id];
  f.owner = owner;
  if (p.kind == "forward" || p.kind == "forward_backward") f.message = "ForwardBackwardOutput";
  if (p.kind == "sample") f.message = "SampleResponse";
  ++pending_count_[owner];
  const std::string id = p.request_id;
  if (model_id.empty()) {
    samples_.push_back(std::move(p));
  } else {
    models_.at(model_id).last_request = Clock::now();
    auto& q = models_.at(model_id).queue;
    // Ordered by seq_id (requests without one after, in arrival order); a queued creation
    // stays first, whatever the seq_ids behind it.
    auto pos = q.end();
    if (p.seq > 0)
      pos = std::find_if(q.begin(), q.end(),
                         [&](const Pending& o) { return o.kind != "create" && (o.seq < 0 || o.seq > p.seq); });
    q.insert(pos, std::move(p));
  }
  work_cv_.notify_all();
  json body = {{"request_id", id}};
  if (!model_id.empty()) {
    body["model_id"] = model_id;
    Model& m = models_.at(model_id);
    if (!m.message.empty()) body["message"] = std::exchange(m.message, "");
  }
  return reply(body);
}

std::string Service::owned_checkpoint(const std::string& owner, const std::string& path, RunStore::Path* out) {
  RunStore::Path p = RunStore::parse(path);  // a malformed path: 400
  if (store_.owned_run(owner, p.run).is_null() || !path_exists(store_.dir(p))) throw ClientError(404, "no checkpoint " + path);
  *out = p;
  return store_.dir(p);
}

HttpResponse Service::retrieve(const std::string& owner, const json& body, bool protobuf) {
  const std::string id = tinker::text(body, "request_id", "");
  std::unique_lock<std::mutex> lock(mu_);
  auto it = futures_.find(id);
  if (it == futures_.end() || it->second.owner != owner)
    throw ClientError(404, "no request '" + id + "' (unknown, or its result was lost when the server restarted)");
  const auto deadline = Clock::now() + std::chrono::duration<double>(opt_.poll_seconds);
  done_cv_.wait_until(lock, deadline, [&] {
    auto f = futures_.find(id);
    return stopping_ || f == futures_.end() || f->second.done;
  });
  it = futures_.find(id);
  if (it == futures_.end()) throw ClientError(410, "request '" + id + "' expired");
  if (!it->second.done) return reply({{"type", "try_again"}, {"request_id", id}, {"queue_state", "active"}});
  const Future& f = it->second;
  // A client that reads protobuf gets these two results as protobuf; errors stay JSON
  // (the schema has no error message).
  if (protobuf && !f.message.empty() && !f.response.contains("error")) {
    HttpResponse r;
    try {
      r.body = f.message == "SampleResponse" ? tinker::encode_sample_response(f.response)
                                             : tinker::encode_forward_backward_output(f.response);
    } catch (const std::exception& e) {  // a result of ours without a protobuf form: our bug
      return {500, body_text(json{{"error", "cannot encode the result as " + f.message + ": " + e.what()},
                                  {"category", "server"}}),
              {}};
    }
    r.content_type = tinker::kProtobufType;
    return r;
  }
  return reply(f.response);
}

void Service::finish(const std::string& request_id, json response) {
  auto it = futures_.find(request_id);
  if (it == futures_.end()) return;
  it->second.done = true;
  it->second.response = std::move(response);
  it->second.finished = Clock::now();
  --pending_count_[it->second.owner];
}

HttpResponse Service::route(const HttpRequest& req, const std::string& owner, RequestHead* head) {
  const std::string& p = req.path;
  const std::string api = "/api/v1/";
  if (p.rfind(api, 0) != 0) throw ClientError(404, "no route " + p);
  std::string r = p.substr(api.size());
  json body = json::object();
  if (!req.content_encoding.empty() && req.content_encoding != "identity")
    throw ClientError(415, "Content-Encoding '" + req.content_encoding +
                               "' is not accepted: send the body as it is (client/config says proto_compress_fwdbwd: false)");
  if (req.method == "POST" && says_protobuf(req.content_type)) {
    // SDK 0.25+: forward_backward, and forward as forward_backward with forward_only.
    if (r != "forward_backward")
      throw ClientError(415, "a protobuf body is taken by forward_backward only; send " + r + " as JSON");
    tinker::DecodedForwardBackward seen;
    tinker::WireLimits limits;
    limits.max_values = std::max<int64_t>(opt_.max_positions, 1);
    try {
      tinker::DecodedForwardBackward d = tinker::decode_forward_backward(req.body, limits, &seen);
      body = std::move(d.body);
      if (d.forward_only) r = "forward";
    } catch (const Error&) {
      head->model_id = seen.model_id;
      head->seq = seen.seq_id;
      throw;
    }
  } else if (req.method == "POST") {
    try {
      body = req.body.empty() ? json::object() : json::parse(req.body);
    } catch (const json::exception& e) {
      throw ClientError(400, std::string("the request body is not JSON: ") + e.what());
    }
    if (!body.is_object()) throw ClientError(400, "the request body is not a JSON object");
  }
  // The model and place in its order, read leniently: a request refused for any reason
  // still spends its seq_id.
  if (auto m = body.find("model_id"); m != body.end() && m->is_string()) head->model_id = m->get<std::string>();
  if (auto q = body.find("seq_id"); q != body.end() && q->is_number_integer()) head->seq = q->get<int64_t>();
  auto post = [&](const char* route) { return req.method == "POST" && r == route; };
  auto owned_model = [&](const std::string& where) -> std::string {
    const std::string id = tinker::text(body, "model_id", where);
    auto it = models_.find(id);
    if (it == models_.end() && revive(owner, id)) it = models_.find(id);
    if (it == models_.end() || it->second.owner != owner) throw ClientError(404, "no model '" + id + "'");
    if (it->second.unloaded) throw ClientError(400, "model '" + id + "' is unloaded");
    return id;
  };

  if (req.method == "GET" && r == "get_server_capabilities")
    return reply({{"supported_models", json::array({{{"model_name", opt_.base_model}}})}});
  if (post("client/config")) {
    // SDKs from 0.25 post forward_backward as protobuf whatever this says, and later ones
    // check that the server says so; older ones would switch on it, and stay on JSON.
    const std::vector<int> v = version_numbers(body.value("sdk_version", json("")).is_string()
                                                   ? body.value("sdk_version", std::string())
                                                   : std::string());
    const bool proto = v >= std::vector<int>{0, 25};
    return reply({{"pjwt_auth_enabled", false}, {"use_pyqwest_transport", false}, {"parallel_fwdbwd_chunks", true},
                  {"proto_write_fwdbwd", proto}, {"proto_compress_fwdbwd", false}, {"sample_no_retries", false}});
  }
  if (post("client/dynamic_config")) return reply({{"refresh_interval_sec", 300}});
  if (post("telemetry")) return reply({{"status", "accepted"}});
  if (post("create_session")) {
    std::lock_guard<std::mutex> lock(mu_);
    expire_sessions();
    const std::string id = new_id("session-");
    sessions_[id] = Session{owner, Clock::now(), {}, {}};
    return reply({{"type", "create_session"},
                  {"session_id", id},
                  {"info_message", "glint serves " + opt_.base_model +
                                       "; LoRA adapts attention and MLP (experts included); the output head is "
                                       "not adapted (train_unembed is ignored)"},
                  {"warning_message", nullptr},
                  {"error_message", nullptr}});
  }
  if (post("session_heartbeat")) {
    std::lock_guard<std::mutex> lock(mu_);
    session_of(owner, tinker::text(body, "session_id", "")).seen = Clock::now();
    return reply({{"type", "session_heartbeat"}});
  }
  if (post("create_model")) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string session = tinker::text(body, "session_id", "");
    Session& s = session_of(owner, session);
    const std::string base = tinker::text(body, "base_model", "");
    if (base != opt_.base_model) throw ClientError(400, "base_model: '" + base + "' is not served (this server: " + opt_.base_model + ")");
    const json& cfg = tinker::object(body, "lora_config", "");
    if (cfg.empty()) throw ClientError(400, "lora_config: required (glint trains LoRA adapters)");
    json lora = lora_json(cfg, "lora_config");
    // No limit on models: those beyond the bank's slots wait on disk (paged out).
    const std::string id = new_id("run-");
    Model m;
    m.owner = owner;
    m.session = session;
    m.lora = lora;
    m.seed = uint64_t(tinker::integer(cfg, "seed", "lora_config", int64_t(rng_() >> 33)));
    store_.create_run(id, {{"owner", owner}, {"base_model", base}, {"lora", lora}, {"seed", m.seed},
                           {"user_metadata", body.value("user_metadata", json(nullptr))}});
    models_[id] = std::move(m);
    model_order_.push_back(id);
    s.models.push_back(id);
    Pending pd;
    pd.kind = "create";
    // The adapter is initialised as `glint train --seed S` initialises its own.
    pd.op = {{"op", "add"}, {"tenant", id}, {"lora", lora}, {"seed", models_[id].seed + 2}, {"trainable", true}};
    return enqueue(owner, id, std::move(pd));
  }
  if (post("get_info")) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string id = owned_model("");
    const Model& m = models_.at(id);
    return reply({{"type", "get_info"},
                  {"model_data", {{"arch", "glint"}, {"model_name", opt_.base_model}, {"tokenizer_id", opt_.base_model}}},
                  {"model_id", id},
                  {"is_lora", true},
                  {"lora_rank", m.lora.at("r")},
                  {"model_name", opt_.base_model}});
  }
  if (post("forward") || post("forward_backward")) {
    const bool backward = r == "forward_backward";
    const std::string key = backward ? "forward_backward_input" : "forward_input";
    const json& input = tinker::object(body, key.c_str(), "");
    if (input.empty()) throw ClientError(400, key + ": required");
    // Later SDKs' loss_fn_config_v2 wins over the older map when both are sent.
    const char* config_key = input.contains("loss_fn_config_v2") && !input["loss_fn_config_v2"].is_null()
                                 ? "loss_fn_config_v2"
                                 : "loss_fn_config";
    const json config = input.value(config_key, json());
    TinkerLoss loss = tinker::parse_loss(input.value("loss_fn", json()), config, key);
    auto data = input.find("data");
    if (data == input.end() || !data->is_array()) throw ClientError(400, key + ".data: required (a list of Datum)");
    for (size_t i = 0; i < data->size(); ++i) {  // every datum checked before anything queues
      tinker::Datum d = tinker::parse_datum((*data)[i], key + ".data[" + std::to_string(i) + "]", loss, opt_.vocab_size);
      if (int64_t(d.tokens.size()) > opt_.max_positions)
        throw ClientError(400, key + ".data[" + std::to_string(i) + "]: " + std::to_string(d.tokens.size()) +
                                   " tokens, the model takes at most " + std::to_string(opt_.max_positions));
    }
    std::lock_guard<std::mutex> lock(mu_);
    const std::string id = owned_model("");
    Pending pd;
    pd.kind = r;
    pd.seq = tinker::integer(body, "seq_id", "", -1);
    pd.op = {{"tenant", id}, {"loss", loss.name}, {"config", config}, {"data", *data}};
    return enqueue(owner, id, std::move(pd));
  }
  if (post("optim_step")) {
    const json& a = tinker::object(body, "adam_params", "");
    json adam = {{"learning_rate", tinker::number(a, "learning_rate", "adam_params", 1e-4)},
                 {"beta1", tinker::number(a, "beta1", "adam_params", 0.9)},
                 {"beta2", tinker::number(a, "beta2", "adam_params", 0.95)},
                 {"eps", tinker::number(a, "eps", "adam_params", 1e-12)},
                 {"weight_decay", tinker::number(a, "weight_decay", "adam_params", 0.0)},
                 {"grad_clip_norm", tinker::number(a, "grad_clip_norm", "adam_params", 0.0)}};
    AdamWOptions check{adam["beta1"], adam["beta2"], adam["eps"], adam["weight_decay"]};
    check.validate("adam_params");
    if (adam["learning_rate"].get<double>() < 0 || adam["grad_clip_norm"].get<double>() < 0)
      throw ClientError(400, "adam_params: learning_rate and grad_clip_norm must be >= 0");
    std::lock_guard<std::mutex> lock(mu_);
    const std::string id = owned_model("");
    Pending pd;
    pd.kind = "optim";
    pd.seq = tinker::integer(body, "seq_id", "", -1);
    pd.op = {{"op", "optim"}, {"tenant", id}, {"adam", adam}};
    return enqueue(owner, id, std::move(pd));
  }
  if (post("save_weights") || post("save_weights_for_sampler")) {
    const bool sampler = r == "save_weights_for_sampler";
    std::lock_guard<std::mutex> lock(mu_);
    const std::string id = owned_model("");
    const std::string kind = sampler ? "sampler_weights" : "weights";
    Pending pd;
    pd.kind = sampler ? "save_sampler" : "save";
    pd.seq = tinker::integer(body, "seq_id", "", -1);
    std::string name = tinker::text(body, "path", "", "");
    const bool session_only = sampler && name.empty() && body.contains("sampling_session_seq_id") &&
                              !body["sampling_session_seq_id"].is_null();
    std::string dir;
    if (session_only) {
      dir = store_.run_dir(id) + "/ephemeral/" + std::to_string(++sampler_counter_);
    } else {
      if (name.empty()) name = new_id("ckpt-");
      tinker::check_checkpoint_name(name, "path");
      dir = store_.dir({id, kind, name});
      if (path_exists(dir)) throw ClientError(409, "path: checkpoint '" + name + "' exists already (names are never overwritten)");
      for (const auto& [oid, m] : models_)
        for (const auto& q : m.queue)
          if (q.dir == dir) throw ClientError(409, "path: checkpoint '" + name + "' is being saved already");
    }
    const std::string partial = RunStore::partial_of(dir);
    make_dirs(fs::path(dir).parent_path().string());
    pd.dir = dir;
    pd.partial = partial;
    pd.path = "tinker://" + id + "/" + kind + "/" + name;
    pd.session_only = session_only;
    pd.session = models_.at(id).session;
    if (sampler)
      pd.op = {{"op", "save_adapter"}, {"tenant", id}, {"dir", partial}, {"base_model", opt_.base_model}};
    else
      pd.op = {{"op", "save_state"}, {"tenant", id}, {"dir", dir}, {"optimizer", true}};
    return enqueue(owner, id, std::move(pd));
  }
  if (post("load_weights")) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string id = owned_model("");
    RunStore::Path cp;
    const std::string path = tinker::text(body, "path", "");
    const std::string dir = owned_checkpoint(owner, path, &cp);
    if (cp.kind != "weights") throw ClientError(400, "path: load_weights reads weights/ checkpoints (with optimizer state), not " + cp.kind);
    const json saved = store_.owned_run(owner, cp.run).at("lora");
    const json& mine = models_.at(id).lora;
    for (const char* k : {"r", "target_modules", "target_parameters"})
      if (saved.at(k) != mine.at(k))
        throw ClientError(400, "path: " + path + " has LoRA " + k + " " + saved.at(k).dump() + ", this model " + mine.at(k).dump());
    Pending pd;
    pd.kind = "load";
    pd.seq = tinker::integer(body, "seq_id", "", -1);
    pd.path = path;
    pd.op = {{"op", "load_state"}, {"tenant", id}, {"dir", dir}, {"optimizer", tinker::boolean(body, "optimizer", "", false)}};
    return enqueue(owner, id, std::move(pd));
  }
  if (post("unload_model")) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string id = owned_model("");
    Pending pd;
    pd.kind = "unload";
    pd.op = {{"op", "remove"}, {"tenant", id}};
    return enqueue(owner, id, std::move(pd));
  }
  if (post("create_sampling_session")) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string session = tinker::text(body, "session_id", "");
    Session& s = session_of(owner, session);
    SamplingSession ss{owner, session, "", ""};
    const std::string path = tinker::text(body, "model_path", "", "");
    if (!path.empty()) {
      RunStore::Path cp;
      ss.dir = owned_checkpoint(owner, path, &cp);
      if (cp.kind != "sampler_weights") throw ClientError(400, "model_path: sampling reads sampler_weights/ checkpoints");
      ss.path = path;
    } else {
      const std::string base = tinker::text(body, "base_model", "", opt_.base_model);
      if (base != opt_.base_model) throw ClientError(400, "base_model: '" + base + "' is not served");
    }
    const std::string id = new_id("sampler-");
    sampling_[id] = ss;
    s.samplers.push_back(id);
    return reply({{"type", "create_sampling_session"}, {"sampling_session_id", id}});
  }
  if (post("asample")) {
    const std::vector<int64_t> prompt = tinker::model_input_tokens(body.value("prompt", json()), "prompt", opt_.vocab_size);
    if (prompt.empty()) throw ClientError(400, "prompt: no tokens");
    const json& sp = tinker::object(body, "sampling_params", "");
    const int64_t n = tinker::integer(body, "num_samples", "", 1);
    if (n < 1 || n > 128) throw ClientError(400, "num_samples: " + std::to_string(n) + " is outside [1, 128]");
    if (tinker::integer(body, "topk_prompt_logprobs", "", 0) > 0)
      throw ClientError(400, "topk_prompt_logprobs: not supported (prompt_logprobs is)");
    const int64_t room = opt_.max_positions - int64_t(prompt.size());
    if (room < 1) throw ClientError(400, "prompt: " + std::to_string(prompt.size()) + " tokens leave no room in the model's " + std::to_string(opt_.max_positions) + " positions");
    const int64_t max_tokens = tinker::integer(sp, "max_tokens", "sampling_params", std::min<int64_t>(room, 512));
    if (max_tokens < 0 || max_tokens > room)
      throw ClientError(400, "sampling_params.max_tokens: " + std::to_string(max_tokens) + " is outside [0, " + std::to_string(room) + "]");
    json stop_ids = json::array(), stop_seqs = json::array();
    if (sp.contains("stop") && !sp["stop"].is_null()) {
      json stop = sp["stop"].is_string() ? json::array({sp["stop"]}) : sp["stop"];
      if (!stop.is_array()) throw ClientError(400, "sampling_params.stop: a string, a list of strings or a list of token ids");
      for (const auto& s : stop) {
        if (s.is_number_integer()) {
          const int64_t id = s.get<int64_t>();
          if (id < 0 || id >= opt_.vocab_size) throw ClientError(400, "sampling_params.stop: token id " + std::to_string(id) + " is outside the vocabulary");
          stop_ids.push_back(id);
        } else if (s.is_string()) {
          if (!opt_.encode) throw ClientError(400, "sampling_params.stop: strings need the model's tokenizer (tokenizer.json or tiktoken.model), which this server has not; send token ids");
          std::vector<int64_t> ids = opt_.encode(s.get<std::string>());
          if (ids.empty()) throw ClientError(400, "sampling_params.stop: an empty stop string");
          stop_seqs.push_back(ids);
        } else {
          throw ClientError(400, "sampling_params.stop: a string, a list of strings or a list of token ids");
        }
      }
    }
    const double temperature = tinker::number(sp, "temperature", "sampling_params", 1.0);
    const int64_t top_k = tinker::integer(sp, "top_k", "sampling_params", -1);
    const double top_p = tinker::number(sp, "top_p", "sampling_params", 1.0);
    if (temperature < 0) throw ClientError(400, "sampling_params.temperature: must be >= 0 (0: greedy)");
    if (top_k == 0 || top_k < -1) throw ClientError(400, "sampling_params.top_k: -1 (off) or a positive count");
    if (!(top_p > 0 && top_p <= 1)) throw ClientError(400, "sampling_params.top_p: must be in (0, 1]");
    std::lock_guard<std::mutex> lock(mu_);
    std::string path, dir;
    if (body.contains("sampling_session_id") && !body["sampling_session_id"].is_null()) {
      const std::string sid = tinker::text(body, "sampling_session_id", "");
      auto it = sampling_.find(sid);
      if (it == sampling_.end() || it->second.owner != owner) throw ClientError(404, "no sampling session '" + sid + "'");
      path = it->second.path;
      dir = it->second.dir;
    } else if (body.contains("model_path") && !body["model_path"].is_null()) {
      path = tinker::text(body, "model_path", "");
      RunStore::Path cp;
      dir = owned_checkpoint(owner, path, &cp);
      if (cp.kind != "sampler_weights") throw ClientError(400, "model_path: sampling reads sampler_weights/ checkpoints");
    } else {
      const std::string base = tinker::text(body, "base_model", "", opt_.base_model);
      if (base != opt_.base_model) throw ClientError(400, "base_model: '" + base + "' is not served");
    }
    Pending pd;
    pd.kind = "sample";
    const uint64_t seed = sp.contains("seed") && !sp["seed"].is_null()
                              ? uint64_t(tinker::integer(sp, "seed", "sampling_params"))
                              : rng_() >> 1;
    pd.path = path;
    pd.dir = dir;
    pd.op = {{"tenant", nullptr}, {"prompt", prompt}, {"num_samples", n}, {"seed", seed}, {"max_tokens", max_tokens},
             {"temperature", temperature}, {"top_k", top_k < 0 ? 0 : top_k}, {"top_p", top_p},
             {"stop_token_ids", stop_ids}, {"stop_sequences", stop_seqs},
             {"prompt_logprobs", tinker::boolean(body, "prompt_logprobs", "", false)}};
    return enqueue(owner, "", std::move(pd));
  }
  if (post("retrieve_future")) return retrieve(owner, body, says_protobuf(req.accept));
  if (post("weights_info")) {
    std::lock_guard<std::mutex> lock(mu_);
    RunStore::Path cp;
    owned_checkpoint(owner, tinker::text(body, "tinker_path", ""), &cp);
    const json rj = store_.owned_run(owner, cp.run);
    const json& l = rj.at("lora");
    return reply({{"base_model", rj.at("base_model")}, {"is_lora", true}, {"lora_rank", l.at("r")},
                  {"train_unembed", l.at("train_unembed")}, {"train_mlp", l.at("train_mlp")}, {"train_attn", l.at("train_attn")}});
  }
  // REST listings: the owner's runs and checkpoints, from disk (they outlive the server).
  auto query_int = [&](const char* key, int64_t fallback) {
    auto it = req.query.find(key);
    if (it == req.query.end()) return fallback;
    char* end = nullptr;
    long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end || v < 0) throw ClientError(400, std::string(key) + ": expected a count, got '" + it->second + "'");
    return int64_t(v);
  };
  const std::string runs = "training_runs";
  if (req.method == "GET" && r == runs) {
    std::vector<std::string> ids = store_.runs_of(owner);
    const int64_t limit = query_int("limit", 20), offset = query_int("offset", 0);
    json list = json::array();
    for (int64_t i = offset; i < int64_t(ids.size()) && i < offset + limit; ++i) list.push_back(store_.training_run(ids[i]));
    return reply({{"training_runs", list}, {"cursor", {{"offset", offset}, {"limit", limit}, {"total_count", ids.size()}}}});
  }
  if (r.rfind(runs + "/", 0) == 0) {
    std::string rest = r.substr(runs.size() + 1);
    const size_t slash = rest.find('/');
    const std::string id = rest.substr(0, slash);
    if (store_.owned_run(owner, id).is_null()) throw ClientError(404, "no training run '" + id + "'");
    if (req.method == "GET" && slash == std::string::npos) return reply(store_.training_run(id));
    const std::string sub = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (req.method == "GET" && sub == "checkpoints") return reply({{"checkpoints", store_.checkpoints(id)}});
    if (req.method == "DELETE" && sub.rfind("checkpoints/", 0) == 0) {
      // weights/NAME or sampler_weights/NAME
      const RunStore::Path cp = RunStore::parse("tinker://" + id + "/" + sub.substr(12));
      std::lock_guard<std::mutex> lock(mu_);
      if (!store_.remove(cp)) throw ClientError(404, "no checkpoint " + cp.tinker());
      // A sampler adapter loaded from it leaves too: a later checkpoint of that name is another.
      if (auto r = resident_.find(cp.tinker()); r != resident_.end()) {
        evicted_.push_back(r->second);
        resident_.erase(r);
      }
      return reply(json::object());
    }
    if (req.method == "GET" && sub.rfind("checkpoints/", 0) == 0)
      throw ClientError(404, "checkpoint archives are not served: the files are under the server's --state-dir");
    throw ClientError(404, "no route " + p);
  }
  if (req.method == "GET" && r == "checkpoints") {
    json all = json::array();
    for (const auto& id : store_.runs_of(owner))
      for (auto& c : store_.checkpoints(id)) all.push_back(c);
    return reply({{"checkpoints", all}, {"cursor", {{"offset", 0}, {"limit", all.size()}, {"total_count", all.size()}}}});
  }
  if (req.method == "GET" && r == "sessions") {
    std::lock_guard<std::mutex> lock(mu_);
    json ids = json::array();
    for (const auto& [id, s] : sessions_)
      if (s.owner == owner) ids.push_back(id);
    return reply({{"sessions", ids}});
  }
  if (req.method == "GET" && r.rfind("sessions/", 0) == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(r.substr(9));
    if (it == sessions_.end() || it->second.owner != owner) throw ClientError(404, "no session '" + r.substr(9) + "'");
    return reply({{"training_run_ids", it->second.models}, {"sampler_ids", it->second.samplers}});
  }
  throw ClientError(404, "no route " + req.method + " " + p);
}

void Service::expire_sessions() {
  // The caller holds mu_. A session silent past the timeout ends with its sampling
  // sessions; its models stay, on disk once paged out, and answer their next request.
  const auto now = Clock::now();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (std::chrono::duration<double>(now - it->second.seen).count() < opt_.session_timeout) {
      ++it;
      continue;
    }
    for (const auto& sid : it->second.samplers) sampling_.erase(sid);
    it = sessions_.erase(it);
  }
}

Service::Session& Service::session_of(const std::string& owner, const std::string& id) {
  // The caller holds mu_. A session id of this server's form that it no longer knows
  // (ended by silence, or made before a restart) is taken up again by its client, so
  // that a client outlives both; one another owner holds is not found.
  auto it = sessions_.find(id);
  if (it != sessions_.end()) {
    if (it->second.owner != owner) throw ClientError(404, "no session '" + id + "'");
    return it->second;
  }
  const std::string prefix = "session-";
  bool ours = id.size() == prefix.size() + 16 && id.rfind(prefix, 0) == 0;
  for (size_t i = prefix.size(); ours && i < id.size(); ++i) ours = std::isxdigit(static_cast<unsigned char>(id[i]));
  if (!ours) throw ClientError(404, "no session '" + id + "'");
  return sessions_[id] = Session{owner, Clock::now(), {}, {}};
}

bool Service::revive(const std::string& owner, const std::string& id) {
  // The caller holds mu_. A model of an earlier process of this server, known from its
  // run on disk, continues from the state it left there.
  const json run = store_.owned_run(owner, id);
  if (run.is_null()) return false;
  const json st = store_.model_state(id);
  const std::string state = st.is_object() ? st.value("state", "") : "";
  Model m;
  m.owner = owner;
  m.lora = run.at("lora");
  m.seed = run.at("seed").get<uint64_t>();
  if (state == "paged" && path_exists(st.value("dir", ""))) {
    m.paged = st.at("dir");
    m.step = st.value("step", int64_t(0));
    m.next_seq = st.value("next_seq", int64_t(1));
    m.message = "model " + id + " continues from its state at step " + std::to_string(m.step) +
                ", which an earlier process of this server paged out";
  } else if (state == "fresh") {
    Pending pd;  // never trained: its adapter is made again from its seed
    pd.kind = "create";
    pd.owner = owner;
    pd.op = {{"op", "add"}, {"tenant", id}, {"lora", m.lora}, {"seed", m.seed + 2}, {"trainable", true}};
    m.queue.push_back(std::move(pd));
    m.message = "model " + id + " continues from its initial state (it was not trained before the server restarted)";
  } else if (state == "unloaded") {
    m.unloaded = true;
  } else {
    json newest = nullptr;
    for (const auto& c : store_.checkpoints(id))
      if (c.at("checkpoint_type") == "training" && (newest.is_null() || newest.at("time") <= c.at("time"))) newest = c;
    std::string how = newest.is_null()
                          ? "it saved no checkpoints of its own: create a new model (and load_weights from a "
                            "checkpoint of another model, if it continued from one)"
                          : "continue from its newest checkpoint, " + newest.at("tinker_path").get<std::string>() +
                                " (create_training_client_from_state, or create_model and load_weights with it)";
    throw ClientError(410, "model '" + id + "' was in memory when the server stopped" +
                               (state == "training" ? " (after step " + std::to_string(st.value("step", int64_t(0))) + ")"
                                                    : std::string()) +
                               ", and its state since was lost; " + how);
  }
  if (!m.message.empty() && opt_.log) opt_.log(m.message);
  models_[id] = std::move(m);
  model_order_.push_back(id);
  return true;
}

void Service::unloaded(const std::string& id) {
  // The caller holds mu_. The model is gone from its slot (or never was in one): its
  // paged state goes too, and a later process refuses it as unloaded.
  Model& m = models_.at(id);
  m.unloaded = true;
  m.resident = false;
  if (!m.paged.empty()) {
    std::error_code ec;
    fs::remove_all(m.paged, ec);
    m.paged.clear();
  }
  store_.write_model_state(id, {{"state", "unloaded"}});
}

void Service::mark_changed(const std::string& id) {
  // The caller holds mu_. The model's state on disk is older than the one in its slot.
  Model& m = models_.at(id);
  if (m.changed) return;
  m.changed = true;
  store_.write_model_state(id, {{"state", "training"}, {"step", m.step}});
}

std::function<void(const json&)> Service::page_out(const std::string& id, json* op) {
  // The caller holds mu_. The model's slot is free once the operation ran; a failed save
  // keeps it where it was.
  Model& m = models_.at(id);
  const std::string dir = store_.new_paged_dir(id, new_id("p-"));
  *op = {{"op", "page_out"}, {"tenant", id}, {"dir", dir}};
  m.resident = false;
  return [this, id, dir](const json& res) {
    Model& m = models_.at(id);
    if (res.contains("error")) {
      m.resident = true;
      if (opt_.log) opt_.log("cannot page model " + id + " out: " + res.at("error").get<std::string>());
      return;
    }
    const std::string old = m.paged;
    m.paged = dir;
    m.changed = false;
    store_.write_model_state(id, {{"state", "paged"}, {"dir", dir}, {"step", m.step}, {"next_seq", m.next_seq}});
    if (!old.empty() && old != dir) {
      std::error_code ec;
      fs::remove_all(old, ec);
    }
  };
}

json Service::next_program(double max_wait) {
  std::unique_lock<std::mutex> lock(mu_);
  auto has_work = [&] {
    if (stopping_ || !samples_.empty()) return true;
    for (const auto& [id, m] : models_)
      if (!m.queue.empty()) return true;
    return false;
  };
  work_cv_.wait_for(lock, std::chrono::duration<double>(max_wait), has_work);
  in_flight_done_.clear();
  if (stopping_) {
    // The last program: every model in a slot goes to disk, so that a restart continues it.
    json ops = json::array();
    for (const std::string& id : model_order_) {
      Model& m = models_.at(id);
      if (!m.resident || m.unloaded) continue;
      json op;
      in_flight_done_.push_back(page_out(id, &op));
      ops.push_back(op);
    }
    return {{"ops", ops}, {"shutdown", true}};
  }
  if (has_work() && opt_.cycle_window > 0) {  // let the other tenants' requests of this cycle arrive
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::duration<double>(opt_.cycle_window));
    lock.lock();
  }
  expire_sessions();
  // A result not fetched within an hour is dropped (retrieve_future: 404).
  for (auto it = futures_.begin(); it != futures_.end();)
    it = it->second.done && Clock::now() - it->second.finished > std::chrono::hours(1) ? futures_.erase(it) : std::next(it);
  std::vector<json> phases[kPhases];
  std::vector<std::function<void(const json&)>> phase_done[kPhases];
  json items[2] = {json::array(), json::array()};  // forward, forward_backward
  std::vector<std::string> item_ids[2];
  auto add = [&](int phase, json op, std::function<void(const json&)> done) {
    phases[phase].push_back(std::move(op));
    phase_done[phase].push_back(std::move(done));
  };
  // An operation answering several requests (a merged forward, a sample batch): its
  // result holds one answer per request, or the operation failed for them all.
  auto per_item = [this](std::vector<std::string> ids) {
    return [this, ids = std::move(ids)](const json& res) {
      if (res.contains("error")) {
        for (const auto& rid : ids) finish(rid, {{"error", res.at("error")}, {"category", res.value("category", "server")}});
        return;
      }
      const json& per = res.at("result");
      for (size_t i = 0; i < ids.size(); ++i) {
        if (per[i].contains("error")) finish(ids[i], {{"error", per[i].at("error")}, {"category", "user"}});
        else finish(ids[i], per[i].at("result"));
      }
    };
  };
  const auto now = Clock::now();
  std::set<std::string> busy;     // models with work in this cycle: they keep their slots
  std::set<std::string> leaving;  // models paged out in this cycle: their work waits
  int64_t resident = 0;
  for (const auto& [id, m] : models_) resident += m.resident;
  // A slot for model `id`: a free one, else that of the least recently used resident
  // model with nothing queued, paged out first (phase 0). When every resident model has
  // work, one that has waited opt_.preempt_after takes the slot of the resident model
  // whose oldest request is the youngest (models are visited oldest request first, so
  // that one has waited less); else `id` waits for a later cycle.
  auto take_slot = [&](const std::string& id) {
    if (resident < opt_.max_tenants) {
      ++resident;
      return true;
    }
    std::string victim;
    for (const auto& [vid, v] : models_)
      if (v.resident && v.queue.empty() && !busy.count(vid) && (victim.empty() || v.last_use < models_.at(victim).last_use))
        victim = vid;
    const Model& m = models_.at(id);
    if (victim.empty() && std::chrono::duration<double>(now - m.queue.front().arrived).count() >= opt_.preempt_after) {
      for (const auto& [vid, v] : models_)
        if (v.resident && !v.queue.empty() && !busy.count(vid) && vid != id &&
            (victim.empty() || v.queue.front().arrived > models_.at(victim).queue.front().arrived))
          victim = vid;
    }
    if (victim.empty()) return false;
    leaving.insert(victim);
    json op;
    auto done = page_out(victim, &op);
    add(0, std::move(op), std::move(done));
    return true;
  };
  // Models whose session ended or went quiet (its client stopped heartbeating) leave
  // their slots at once, for clients still at work.
  for (const std::string& id : model_order_) {
    Model& m = models_.at(id);
    if (!m.resident || m.unloaded || !m.queue.empty()) continue;
    auto s = sessions_.find(m.session);
    const Clock::time_point heard = s == sessions_.end() ? m.last_request : std::max(m.last_request, s->second.seen);
    if (std::chrono::duration<double>(now - heard).count() < opt_.idle_release) continue;
    json op;
    auto done = page_out(id, &op);
    add(0, std::move(op), std::move(done));
    --resident;
  }
  // Models with work, the one waiting longest first: slots go to them in that order.
  std::vector<std::string> order;
  for (const std::string& id : model_order_)
    if (!models_.at(id).queue.empty()) order.push_back(id);
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    return models_.at(a).queue.front().arrived < models_.at(b).queue.front().arrived;
  });
  for (const std::string& id : order) {
    Model& m = models_.at(id);
    int last = -1;
    while (!m.queue.empty()) {
      while (!m.refused.empty() && *m.refused.begin() <= m.next_seq) {  // spent seq_ids
        if (*m.refused.begin() == m.next_seq) ++m.next_seq;
        m.refused.erase(m.refused.begin());
      }
      Pending& pd = m.queue.front();
      const bool gap = pd.seq > 0 && pd.seq > m.next_seq &&
                       std::chrono::duration<double>(now - pd.arrived).count() < opt_.seq_wait;
      const int phase = phase_of(pd.kind);
      if (gap || phase < last || leaving.count(id)) break;
      if (!m.resident && pd.kind == "unload") {  // nothing in a slot: its state on disk goes
        unloaded(id);
        finish(pd.request_id, {{"model_id", id}, {"type", "unload_model"}});
        m.queue.pop_front();
        continue;
      }
      if (!m.resident) {
        if (pd.kind != "create" && m.paged.empty()) {  // its creation failed: nothing to run
          if (pd.seq > 0) m.next_seq = std::max(m.next_seq, pd.seq + 1);
          finish(pd.request_id, {{"error", "model " + id + " has no state to run on (its creation failed)"},
                                 {"category", "server"}});
          m.queue.pop_front();
          continue;
        }
        if (!take_slot(id)) break;  // every slot is at work this cycle: a later one
        m.resident = true;
        if (pd.kind != "create") {
          add(1, {{"op", "page_in"}, {"tenant", id}, {"lora", m.lora}, {"seed", m.seed + 2}, {"dir", m.paged}},
              [this, id](const json& res) {
                Model& m = models_.at(id);
                if (res.contains("error")) {
                  m.resident = false;
                  if (opt_.log) opt_.log("cannot page model " + id + " in: " + res.at("error").get<std::string>());
                } else {
                  m.step = res.at("result").at("step").get<int64_t>();
                }
              });
        }
      }
      busy.insert(id);
      m.last_use = ++use_clock_;
      if (pd.kind == "forward_backward" || pd.kind == "optim" || pd.kind == "load") mark_changed(id);
      last = phase;
      if (pd.seq > 0) m.next_seq = std::max(m.next_seq, pd.seq + 1);
      Pending p = std::move(pd);
      m.queue.pop_front();
      if (p.kind == "forward" || p.kind == "forward_backward") {
        const int k = p.kind == "forward_backward";
        items[k].push_back(p.op);
        item_ids[k].push_back(p.request_id);
        continue;
      }
      const std::string rid = p.request_id, kind = p.kind, model_id = id;
      json op = std::move(p.op);
      p.op = nullptr;
      add(phase, std::move(op), [this, rid, kind, model_id, info = std::move(p)](const json& res) {
        if (res.contains("error")) {
          if (kind == "create") {
            models_.at(model_id).unloaded = true;
            models_.at(model_id).resident = false;
          }
          if (!info.partial.empty()) {
            std::error_code ec;
            fs::remove_all(info.partial, ec);
          }
          finish(rid, {{"error", res.at("error")}, {"category", res.value("category", "server")}});
          return;
        }
        if (kind == "create") {
          if (!models_.at(model_id).changed) store_.write_model_state(model_id, {{"state", "fresh"}});
          finish(rid, {{"model_id", model_id}, {"type", "create_model"}});
        } else if (kind == "load") {
          finish(rid, {{"path", info.path}, {"type", "load_weights"}});
        } else if (kind == "optim") {
          models_.at(model_id).step = res.at("result").at("step").get<int64_t>();
          finish(rid, {{"metrics", {{"grad_norm:mean", res.at("result").at("grad_norm")}}}});
        } else if (kind == "save") {
          finish(rid, {{"path", info.path}, {"type", "save_weights"}});
        } else if (kind == "save_sampler") {
          std::error_code ec;
          fs::rename(info.partial, info.dir, ec);
          if (ec) {
            finish(rid, {{"error", "cannot put the saved adapter in place: " + ec.message()}, {"category", "server"}});
          } else if (info.session_only) {
            const std::string sid = new_id("sampler-");
            const std::string& session = info.session;
            sampling_[sid] = SamplingSession{models_.at(model_id).owner, session, "ephemeral:" + info.dir, info.dir};
            if (sessions_.count(session)) sessions_.at(session).samplers.push_back(sid);
            finish(rid, {{"path", nullptr}, {"sampling_session_id", sid}, {"type", "save_weights_for_sampler"}});
          } else {
            finish(rid, {{"path", info.path}, {"type", "save_weights_for_sampler"}});
          }
        } else if (kind == "unload") {
          unloaded(model_id);
          finish(rid, {{"model_id", model_id}, {"type", "unload_model"}});
        }
      });
    }
  }
  for (int k = 0; k < 2; ++k) {
    if (items[k].empty()) continue;
    std::vector<std::string> ids = item_ids[k];
    add(2, {{"op", "forward"}, {"backward", k == 1}, {"items", items[k]}}, per_item(ids));
  }
  for (const std::string& tenant : evicted_) add(5, {{"op", "remove"}, {"tenant", tenant}}, [](const json&) {});
  evicted_.clear();
  // Sampling: the adapters this cycle's requests need are made resident (least recently
  // used ones leave); requests beyond the sampler slots wait for a later cycle.
  if (!samples_.empty()) {
    std::set<std::string> needed;
    json requests = json::array();
    std::vector<std::string> ids;
    std::deque<Pending> later;
    while (!samples_.empty()) {
      Pending p = std::move(samples_.front());
      samples_.pop_front();
      const std::string path = p.path;
      if (!path.empty() && !needed.count(path) && !resident_.count(path) &&
          int64_t(needed.size()) >= opt_.sampler_slots) {
        later.push_back(std::move(p));
        continue;
      }
      if (!path.empty()) needed.insert(path);
      json op = p.op;
      op["path"] = path;
      op["dir"] = p.dir;
      requests.push_back(op);
      ids.push_back(p.request_id);
    }
    samples_ = std::move(later);
    for (const std::string& path : needed) {
      last_use_[path] = ++use_clock_;
      if (resident_.count(path)) continue;
      if (int64_t(resident_.size()) >= opt_.sampler_slots) {  // evict the least recently used idle one
        std::string victim;
        for (const auto& [q, name] : resident_)
          if (!needed.count(q) && (victim.empty() || last_use_[q] < last_use_[victim])) victim = q;
        add(5, {{"op", "remove"}, {"tenant", resident_.at(victim)}}, [](const json&) {});
        resident_.erase(victim);
      }
      const std::string name = "sampler-" + std::to_string(++sampler_counter_);
      std::string dir;
      for (const auto& r : requests)
        if (r.at("path") == path) dir = r.at("dir");
      LoraOptions o = lora_options_from_adapter_config(dir + "/adapter_config.json");
      json lora = {{"r", o.r}, {"alpha", o.alpha}, {"rslora", o.use_rslora}, {"target_modules", o.target_modules},
                   {"target_parameters", o.target_parameters}};
      resident_[path] = name;
      add(5, {{"op", "add"}, {"tenant", name}, {"lora", lora}, {"seed", 0}, {"trainable", false}, {"adapter_dir", dir}},
          [this, path](const json& res) {
            if (res.contains("error")) resident_.erase(path);
          });
    }
    for (auto& r : requests) {
      const std::string path = r.at("path");
      r["tenant"] = path.empty() ? json(nullptr) : json(resident_.at(path));
      r.erase("path");
      r.erase("dir");
    }
    add(5, {{"op", "sample"}, {"requests", requests}}, per_item(ids));
  }
  json ops = json::array();
  for (int ph = 0; ph < kPhases; ++ph)
    for (size_t i = 0; i < phases[ph].size(); ++i) {
      ops.push_back(phases[ph][i]);
      in_flight_done_.push_back(phase_done[ph][i]);
    }
  return {{"ops", ops}};
}

void Service::complete(const json& results) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < in_flight_done_.size() && i < results.size(); ++i) in_flight_done_[i](results[i]);
  in_flight_done_.clear();
  done_cv_.notify_all();
}

}  // namespace glint
