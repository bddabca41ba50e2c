#include "serve/executor.h"

#include <ATen/ATen.h>

#include "core/error.h"
#include "generate/generate.h"
#include "lora/tenants.h"
#include "serve/losses.h"
#include "serve/protocol.h"
#include "train/trainer.h"

namespace glint {

namespace {

// The tenant an "add" or "page_in" operation names: {tenant, lora, seed}.
TenantOptions tenant_options(const nlohmann::json& op) {
  TenantOptions t;
  t.name = op.at("tenant").get<std::string>();
  const nlohmann::json& l = op.at("lora");
  t.lora.r = l.at("r").get<int64_t>();
  t.lora.alpha = l.at("alpha").get<double>();
  t.lora.use_rslora = l.value("rslora", false);
  t.lora.target_modules = l.at("target_modules").get<std::vector<std::string>>();
  t.lora.target_parameters = l.at("target_parameters").get<std::vector<std::string>>();
  t.seed = op.at("seed").get<uint64_t>();
  return t;
}

}  // namespace

nlohmann::json CycleExecutor::run(const nlohmann::json& program) {
  nlohmann::json results = nlohmann::json::array();
  for (const nlohmann::json& op : program.at("ops")) {
    const std::string kind = op.at("op").get<std::string>();
    try {
      nlohmann::json r;
      if (kind == "add") {
        const TenantOptions t = tenant_options(op);
        trainer_.add_service_tenant(t, op.at("trainable").get<bool>());
        if (op.contains("adapter_dir")) {  // a saved adapter's weights, or no tenant at all
          try {
            trainer_.load_service_adapter(t.name, op.at("adapter_dir"));
          } catch (...) {
            trainer_.remove_service_tenant(t.name);
            throw;
          }
        }
      } else if (kind == "remove") {
        trainer_.remove_service_tenant(op.at("tenant").get<std::string>());
      } else if (kind == "page_out") {
        // Its whole state, gradients included, then its slot; a failed save keeps it.
        const std::string tenant = op.at("tenant");
        trainer_.save_service_state(tenant, op.at("dir"), /*optimizer=*/true, /*gradients=*/true);
        trainer_.remove_service_tenant(tenant);
      } else if (kind == "page_in") {
        const TenantOptions t = tenant_options(op);
        trainer_.add_service_tenant(t, /*trainable=*/true);
        try {
          trainer_.load_service_state(t.name, op.at("dir"), /*optimizer=*/true, /*gradients=*/true);
        } catch (...) {
          trainer_.remove_service_tenant(t.name);
          throw;
        }
        r = {{"step", trainer_.service_steps_taken(t.name)}};
      } else if (kind == "load_state") {
        trainer_.load_service_state(op.at("tenant"), op.at("dir"), op.at("optimizer").get<bool>());
      } else if (kind == "forward") {
        r = forward(op);
      } else if (kind == "optim") {
        const nlohmann::json& a = op.at("adam");
        ServiceStep step;
        step.lr = a.at("learning_rate").get<double>();
        step.adam.beta1 = a.at("beta1").get<double>();
        step.adam.beta2 = a.at("beta2").get<double>();
        step.adam.eps = a.at("eps").get<double>();
        step.adam.weight_decay = a.at("weight_decay").get<double>();
        step.max_grad_norm = a.at("grad_clip_norm").get<double>();
        const std::string tenant = op.at("tenant");
        const double norm = trainer_.service_optim_step(tenant, step);
        r = {{"grad_norm", norm}, {"step", trainer_.service_steps_taken(tenant)}};
      } else if (kind == "save_state") {
        trainer_.save_service_state(op.at("tenant"), op.at("dir"), op.at("optimizer").get<bool>());
      } else if (kind == "save_adapter") {
        trainer_.save_service_adapter(op.at("tenant"), op.at("dir"), op.at("base_model"));
      } else if (kind == "sample") {
        r = sample(op);
      } else {
        fail("unknown operation '", kind, "'");
      }
      results.push_back({{"result", r}});
    } catch (const Error& e) {  // a bad input, found on every rank alike
      results.push_back({{"error", e.what()}, {"category", "user"}});
    } catch (const c10::Error& e) {
      results.push_back({{"error", e.what_without_backtrace()}, {"category", "server"}});
    } catch (const std::exception& e) {
      results.push_back({{"error", e.what()}, {"category", "server"}});
    }
  }
  return results;
}

nlohmann::json CycleExecutor::forward(const nlohmann::json& op) {
  // Every item's datums become rows of one mixed-tenant batch; each item's losses are
  // its own. Items were validated by the service; a tenant gone since is the item's error.
  const bool backward = op.at("backward").get<bool>();
  const TenantBank& bank = trainer_.tenant_bank();
  const int64_t vocab = trainer_.model().config.vocab_size;
  const at::ScalarType dtype = trainer_.model().placement.dtype == at::kDouble ? at::kDouble : at::kFloat;
  const c10::Device device = trainer_.model().placement.device;
  std::vector<ServiceRow> rows;
  std::vector<std::pair<size_t, size_t>> item_rows;  // [first, end) per item
  nlohmann::json out = nlohmann::json::array();
  std::vector<std::string> errors;
  for (const nlohmann::json& item : op.at("items")) {
    const size_t first = rows.size();
    std::string error;
    try {
      const int64_t slot = bank.slot_of(item.at("tenant").get<std::string>());
      GLINT_CHECK(slot >= 0, "model ", item.at("tenant").get<std::string>(), " is not loaded");
      TinkerLoss loss = tinker::parse_loss(item.at("loss"), item.value("config", nlohmann::json()), "");
      std::vector<ServiceRow> mine;
      const nlohmann::json& data = item.at("data");
      for (size_t i = 0; i < data.size(); ++i) {
        tinker::Datum d = tinker::parse_datum(data[i], "data[" + std::to_string(i) + "]", loss, vocab);
        ServiceRow row;
        row.slot = slot;
        row.tokens = std::move(d.tokens);
        row.targets = std::move(d.targets);
        std::map<std::string, at::Tensor> inputs;
        for (auto& [name, values] : d.inputs)
          inputs[name] = at::tensor(values, at::kDouble).to(device, dtype);
        row.objective = [loss, inputs](const at::Tensor& lp) { return loss(lp, inputs); };
        mine.push_back(std::move(row));
      }
      for (auto& r : mine) rows.push_back(std::move(r));
    } catch (const Error& e) {
      error = e.what();
    }
    item_rows.emplace_back(first, rows.size());
    errors.push_back(error);
  }
  ServiceForward f = trainer_.service_forward(rows, backward);
  for (size_t k = 0; k < item_rows.size(); ++k) {
    if (!errors[k].empty()) {
      out.push_back({{"error", errors[k]}});
      continue;
    }
    nlohmann::json outputs = nlohmann::json::array();
    double loss = 0;
    for (size_t i = item_rows[k].first; i < item_rows[k].second; ++i) {
      outputs.push_back({{"logprobs", tinker::tensor_data(f.logprobs[i])}});
      loss += f.objective[i];
    }
    out.push_back({{"result",
                    {{"loss_fn_output_type", "TensorData"},
                     {"loss_fn_outputs", outputs},
                     {"metrics", {{"loss:sum", loss}}}}}});
  }
  return out;
}

nlohmann::json CycleExecutor::sample(const nlohmann::json& op) {
  // Each request's samples are requests of their own (seed + i), all generated together.
  std::vector<GenerationRequest> requests;
  std::vector<std::pair<size_t, size_t>> spans;
  const TenantBank& bank = trainer_.tenant_bank();
  nlohmann::json out = nlohmann::json::array();
  std::vector<std::string> errors;
  for (const nlohmann::json& r : op.at("requests")) {
    const size_t first = requests.size();
    std::string error;
    try {
      GenerationRequest g;
      if (!r.at("tenant").is_null()) {
        g.tenant_slot = bank.slot_of(r.at("tenant").get<std::string>());
        GLINT_CHECK(g.tenant_slot >= 0, "its adapter is not loaded");
      }
      g.prompt = r.at("prompt").get<std::vector<int64_t>>();
      g.prompt_logprobs = r.at("prompt_logprobs").get<bool>();
      SamplingParams& sp = g.sampling;
      sp.max_new_tokens = r.at("max_tokens").get<int64_t>();
      sp.temperature = r.at("temperature").get<double>();
      sp.top_k = r.at("top_k").get<int64_t>();
      sp.top_p = r.at("top_p").get<double>();
      sp.stop_token_ids = r.at("stop_token_ids").get<std::vector<int64_t>>();
      sp.stop_sequences = r.at("stop_sequences").get<std::vector<std::vector<int64_t>>>();
      const uint64_t seed = r.at("seed").get<uint64_t>();
      const int64_t n = r.at("num_samples").get<int64_t>();
      for (int64_t i = 0; i < n; ++i) {
        GenerationRequest one = g;
        one.sampling.seed = seed + uint64_t(i);
        one.prompt_logprobs = g.prompt_logprobs && i == 0;
        requests.push_back(std::move(one));
      }
    } catch (const Error& e) {
      error = e.what();
      requests.resize(first);
    }
    spans.emplace_back(first, requests.size());
    errors.push_back(error);
  }
  std::vector<GenerationResult> results = trainer_.service_generate(requests);
  for (size_t k = 0; k < spans.size(); ++k) {
    if (!errors[k].empty()) {
      out.push_back({{"error", errors[k]}});
      continue;
    }
    nlohmann::json seqs = nlohmann::json::array(), prompt_lp = nullptr;
    for (size_t i = spans[k].first; i < spans[k].second; ++i) {
      const GenerationResult& g = results[i];
      seqs.push_back({{"stop_reason", stop_reason_name(g.stop)}, {"tokens", g.tokens}, {"logprobs", g.logprobs}});
      if (i == spans[k].first && requests[i].prompt_logprobs) {
        prompt_lp = nlohmann::json::array();
        for (size_t j = 0; j < g.prompt_logprobs.size(); ++j)
          prompt_lp.push_back(j == 0 ? nlohmann::json(nullptr) : nlohmann::json(g.prompt_logprobs[j]));
      }
    }
    nlohmann::json res = {{"sequences", seqs}, {"type", "sample"}};
    if (!prompt_lp.is_null()) res["prompt_logprobs"] = prompt_lp;
    out.push_back({{"result", res}});
  }
  return out;
}

}  // namespace glint
