// glint serve: the Tinker-API training service over one base model, sharded as in
// training (--ep, --fsdp; under glint launch or torchrun). Rank 0 answers HTTP and
// forms the clock cycles; every cycle's program is broadcast and run by every rank.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <ctime>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/stop_signal.h"
#include "dist/comm.h"
#include "dist/world.h"
#include "model/family.h"
#include "serve/executor.h"
#include "serve/http_server.h"
#include "serve/service.h"
#include "tokenizer/tokenizer.h"
#include "train/trainer.h"

namespace glint::cli {

namespace {

struct ServeArgs {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string port_file, api_keys, name;
  bool insecure = false;
  bool access_log = true;
  int64_t max_body_mb = 256;
  int http_threads = 64;
  double cycle_window_ms = 20;
};

// "KEY OWNER" per line; '#' starts a comment. Keys start with "tml-" (the SDK's rule).
std::map<std::string, std::string> read_api_keys(const std::string& path) {
  std::map<std::string, std::string> keys;
  std::istringstream in(read_file(path));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream words(line);
    std::string key, owner, extra;
    if (!(words >> key)) continue;
    GLINT_USAGE_CHECK(bool(words >> owner) && !(words >> extra), "--api-keys ", path, ":", n,
                      ": expected 'KEY OWNER'");
    GLINT_USAGE_CHECK(key.rfind("tml-", 0) == 0 && key.size() >= 12, "--api-keys ", path, ":", n,
                      ": a key starts with 'tml-' and has at least 12 characters");
    GLINT_USAGE_CHECK(!keys.count(key), "--api-keys ", path, ":", n, ": the key appears twice");
    keys[key] = owner;
  }
  GLINT_USAGE_CHECK(!keys.empty(), "--api-keys ", path, ": no keys");
  return keys;
}

}  // namespace

Action add_serve(CLI::App& app) {
  auto* cmd = add_command(app, "serve");
  auto opts = std::make_shared<TrainOptions>();
  auto args = std::make_shared<ServeArgs>();
  auto svc = std::make_shared<ServiceOptions>();
  opts->model.dtype = "auto";
  cmd->add_option("--model", opts->model.dir, "Hugging Face model directory to serve")->required();
  cmd->add_option("--name", args->name, "the base model's name for clients (default: config.json's _name_or_path, "
                                        "else the directory's name)");
  cmd->add_option("--host", args->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "port (0: any free port)")->capture_default_str();
  cmd->add_option("--port-file", args->port_file, "write the port here once listening");
  cmd->add_option("--state-dir", svc->state_dir, "training runs and checkpoints (kept across restarts)")->required();
  cmd->add_option("--api-keys", args->api_keys, "file of 'KEY OWNER' lines (keys start with tml-)");
  cmd->add_flag("--insecure-no-auth", args->insecure, "serve without API keys (only on a loopback address)");
  cmd->add_option("--max-rank", svc->max_rank, "largest LoRA rank a model may ask for")->capture_default_str();
  cmd->add_option("--sampler-slots", svc->sampler_slots, "sampler adapters kept loaded")->capture_default_str();
  cmd->add_option("--max-pending", svc->max_pending, "queued requests per owner before 429")->capture_default_str();
  cmd->add_option("--max-body-mb", args->max_body_mb, "largest request body (413 beyond)")->capture_default_str();
  cmd->add_option("--max-tenants", svc->max_tenants, "trained models in slots at once; the others wait on disk, "
                                                     "paged out least recently used first")
      ->capture_default_str();
  cmd->add_option("--session-timeout", svc->session_timeout, "seconds without heartbeat before a session ends (its "
                                                             "models stay)")->capture_default_str();
  cmd->add_option("--idle-release", svc->idle_release, "seconds a model's client may be silent (no request, no "
                                                       "heartbeat) before its model leaves its slot for disk")
      ->capture_default_str();
  cmd->add_option("--poll-seconds", svc->poll_seconds, "retrieve_future long-poll")->capture_default_str();
  cmd->add_option("--cycle-window-ms", args->cycle_window_ms, "a cycle waits this long for other tenants' requests")
      ->capture_default_str();
  cmd->add_option("--http-threads", args->http_threads, "HTTP worker threads")->capture_default_str();
  cmd->add_flag("--access-log,!--no-access-log", args->access_log,
                "a line on stderr per request: time, owner, route, status, milliseconds");
  cmd->add_flag("--fsdp,!--no-fsdp", opts->parallel.fsdp, "shard decoder layers over the ranks");
  cmd->add_option("--ep", opts->parallel.ep, "expert parallelism: experts sharded over N ranks")->capture_default_str();
  cmd->add_option("--ep-layout", opts->parallel.ep_layout, "EP groups: contiguous or strided")->capture_default_str();
  cmd->add_flag("--activation-checkpointing", opts->parallel.recompute, "recompute each layer in backward");
  opts->memory.micro_batch_size = 8;
  cmd->add_option("--micro-batch-size", opts->memory.micro_batch_size, "rows per forward on a rank (0: all of its share at once)")
      ->capture_default_str();
  cmd->add_option("--dtype", opts->model.dtype, "auto, float32, bfloat16 or float64")->capture_default_str();
  cmd->add_option("--device", opts->model.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--threads", opts->model.threads, "intra-op threads (0: OMP_NUM_THREADS if set, else the cores shared among the node's ranks)")->capture_default_str();
  cmd->add_option("--seed", opts->seed, "dropout streams (adapters take each model's own seed)")->capture_default_str();
  return [=]() -> int {
    const World world = World::from_env();
    auto comm = Comm::create(world, resolve_device(opts->model.device, world.local_rank, "--device"));
    const bool lead = comm->rank() == 0;
    if (!args->api_keys.empty()) {
      svc->api_keys = read_api_keys(args->api_keys);
    } else {
      GLINT_USAGE_CHECK(args->insecure, "glint serve: --api-keys FILE is required (or --insecure-no-auth on a "
                                        "loopback address)");
      GLINT_USAGE_CHECK(args->host == "127.0.0.1" || args->host == "localhost" || args->host == "::1",
                        "--insecure-no-auth serves only on a loopback address, not ", args->host);
    }
    GLINT_USAGE_CHECK(svc->max_tenants >= 1 && svc->max_rank >= 1 && svc->sampler_slots >= 1 && svc->max_pending >= 1,
                      "--max-tenants, --max-rank, --sampler-slots and --max-pending must be positive");
    GLINT_USAGE_CHECK(args->max_body_mb >= 1, "--max-body-mb must be positive");
    opts->service.slots = svc->max_tenants + svc->sampler_slots;
    opts->service.r_max = svc->max_rank;
    opts->optim.router_aux_loss_coef = 0;
    opts->validate();
    Trainer trainer(*opts, comm);
    CycleExecutor executor(trainer);
    std::unique_ptr<Service> service;
    std::unique_ptr<HttpServer> http;
    std::thread http_thread;
    StopSignals signals;
    if (lead) {
      const ModelConfig& c = trainer.model().config;
      svc->vocab_size = c.vocab_size;
      svc->max_positions = c.max_position_embeddings;
      svc->lora_targets = trainer.model().family->lora_targets();
      svc->cycle_window = args->cycle_window_ms / 1000.0;
      svc->base_model = args->name;
      if (svc->base_model.empty()) {
        nlohmann::json cfg = read_json_file(opts->model.dir + "/config.json");
        svc->base_model = cfg.value("_name_or_path", "");
        if (svc->base_model.empty())
          svc->base_model = std::filesystem::path(opts->model.dir).lexically_normal().filename().string();
        if (svc->base_model.empty() || svc->base_model == ".")
          svc->base_model = std::filesystem::absolute(opts->model.dir).lexically_normal().parent_path().filename().string();
      }
      if (Tokenizer::found_in(opts->model.dir)) {
        auto tok = std::make_shared<Tokenizer>(Tokenizer::load(opts->model.dir));
        svc->encode = [tok](const std::string& s) {
          std::vector<int32_t> ids = tok->encode(s, /*add_special_tokens=*/false);
          return std::vector<int64_t>(ids.begin(), ids.end());
        };
      }
      auto log_mutex = std::make_shared<std::mutex>();  // whole lines: the two logs share stderr
      if (args->access_log) {
        svc->access_log = [mu = log_mutex](const std::string& line) {
          char when[32];
          const std::time_t now = std::time(nullptr);
          std::tm tm{};
          gmtime_r(&now, &tm);
          std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
          std::lock_guard<std::mutex> lock(*mu);
          std::cerr << when << " " << line << "\n";
        };
      }
      svc->log = [mu = log_mutex](const std::string& line) {
        std::lock_guard<std::mutex> lock(*mu);
        std::cerr << "glint serve: " << line << "\n";
      };
      service = std::make_unique<Service>(*svc);
      http = std::make_unique<HttpServer>(*service, args->max_body_mb << 20, args->http_threads);
      const int port = http->bind(args->host, args->port);
      http_thread = std::thread([&] { http->serve(); });
      // What a request may add to the weights and the model slots (train/memory_estimate.h):
      // the service runs one cycle at a time, a training step's or a sampling batch's.
      const int64_t rows = opts->memory.micro_batch_size > 0 ? opts->memory.micro_batch_size : 8;
      const int64_t tokens = std::min<int64_t>(1024, c.max_position_embeddings);
      const MemoryEstimate step = trainer.estimate_step_memory(rows, tokens, 1);
      DecodeInputs sampling;
      sampling.rows = 8;
      sampling.positions = std::min<int64_t>(2048, c.max_position_embeddings);
      sampling.prompt = sampling.positions / 2;
      sampling.dtype_bytes = int64_t(c10::elementSize(trainer.model().placement.dtype));
      const DecodeEstimate decoding = trainer.estimate_decoding_memory(sampling);
      std::cerr << "glint serve: training " << rows << " rows x " << tokens << " tokens per forward: "
                << step.line(rows, tokens) << "\n"
                << "glint serve: sampling " << sampling.rows << " rows of " << sampling.prompt << " + "
                << sampling.positions - sampling.prompt << " tokens: " << decoding.line(sampling) << "\n";
      std::cerr << "glint serve: " << svc->base_model << " (" << opts->model.dir << "), "
                << svc->max_tenants << " model slots, rank <= " << svc->max_rank
                << (comm->size() > 1 ? ", " + std::to_string(comm->size()) + " ranks" : std::string())
                << ", state in " << svc->state_dir << "\n"
                << "glint serve: listening on http://" << args->host << ":" << port << "/api/v1\n";
      if (!args->port_file.empty()) write_text_atomic(args->port_file, std::to_string(port) + "\n");
    }
    while (true) {
      nlohmann::json program;
      if (lead) {
        if (StopSignals::received()) service->stop();
        program = service->next_program(0.5);
      }
      if (comm->size() > 1) program = nlohmann::json::parse(comm->broadcast_text(lead ? program.dump() : "", 0));
      if (program.at("ops").empty()) {
        if (program.value("shutdown", false)) break;
        continue;
      }
      nlohmann::json results = executor.run(program);
      if (lead) service->complete(results);
      if (program.value("shutdown", false)) break;  // its models were paged out to disk
    }
    if (lead) {
      http->stop();
      http_thread.join();
      std::cerr << "glint serve: stopped\n";
    }
    return 0;
  };
}

}  // namespace glint::cli
