#include "lora/peft_io.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "core/fs.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"

namespace glint {

namespace {
constexpr const char* kPrefix = "base_model.model.";
constexpr const char* kWeightsFile = "adapter_model.safetensors";
constexpr const char* kConfigFile = "adapter_config.json";
}  // namespace

at::Tensor expert_A_to_peft(const at::Tensor& A) {
  return A.reshape({A.size(0) * A.size(1), A.size(2)});
}

at::Tensor expert_B_to_peft(const at::Tensor& B) {
  // [E,out,r] -> [out,r,E] -> [out, r*E]: the expert index varies fastest.
  return B.permute({1, 2, 0}).reshape({B.size(1), B.size(2) * B.size(0)});
}

at::Tensor expert_A_from_peft(const at::Tensor& A, int64_t E) {
  return A.reshape({E, A.size(0) / E, A.size(1)});
}

at::Tensor expert_B_from_peft(const at::Tensor& B, int64_t E) {
  return B.reshape({B.size(0), B.size(1) / E, E}).permute({2, 0, 1}).contiguous();
}

namespace {

// The packed tensor a LoRA expert site corrects.
PackedExpert site_packed_expert(const LoraSite& site) {
  GLINT_ASSERT(site.parameter == "gate_up_proj" || site.parameter == "down_proj", site.module_path,
               ": not a packed expert parameter: '", site.parameter, "'");
  return site.parameter == "gate_up_proj" ? PackedExpert::kGateUp : PackedExpert::kDown;
}

const ModelFamily& adapter_family(const LoraModel& lora) {
  GLINT_ASSERT(lora.family, "a LoRA model without its model's family (apply_lora and make_lora set it)");
  return *lora.family;
}

}  // namespace

std::string peft_key(const LoraModel& lora, const LoraSite& site, bool is_A) {
  if (site.parameter.empty()) return kPrefix + site.module_path + (is_A ? ".lora_A.weight" : ".lora_B.weight");
  std::string path = kPrefix + adapter_family(lora).expert_keys().peft_module(site.layer);
  const auto& targets = lora.options.target_parameters;
  bool both = std::count(targets.begin(), targets.end(), "gate_up_proj") &&
              std::count(targets.begin(), targets.end(), "down_proj");
  if (both && site_packed_expert(site) == PackedExpert::kGateUp) path += ".base_layer";
  return path + (is_A ? ".lora_A.weight" : ".lora_B.weight");
}

std::vector<std::pair<std::string, at::Tensor>> peft_state_dict(LoraModel& lora) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& s : lora.sites) {
    at::Tensor A = s.A().detach().to(at::kCPU), B = s.B().detach().to(at::kCPU);
    if (s.experts) {
      A = expert_A_to_peft(A);
      B = expert_B_to_peft(B);
    }
    out.emplace_back(peft_key(lora, s, true), A.contiguous());
    out.emplace_back(peft_key(lora, s, false), B.contiguous());
  }
  return out;
}

nlohmann::json adapter_config_json(const LoraOptions& o, const ModelFamily& family, const std::string& base) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : o.target_parameters)
    params.push_back(family.expert_keys().peft_target_parameter(p == "gate_up_proj" ? PackedExpert::kGateUp
                                                                                    : PackedExpert::kDown));
  return {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", base},
      {"r", o.r},
      {"lora_alpha", o.alpha},
      {"use_rslora", o.use_rslora},
      {"target_modules", o.target_modules},
      {"target_parameters", params},
      {"exclude_modules", o.exclude_modules.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.exclude_modules)},
      {"lora_dropout", o.dropout},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"use_dora", false},
      {"modules_to_save", nullptr},
      {"layers_to_transform", nullptr},
      {"rank_pattern", nlohmann::json::object()},
      {"alpha_pattern", nlohmann::json::object()},
  };
}

LoraOptions lora_options_from_adapter_config(const std::string& path) {
  nlohmann::json j = read_json_file(path);
  GLINT_CHECK(j.is_object(), path, ": must be a JSON object");
  auto get = [&](const char* key) -> const nlohmann::json& {
    auto it = j.find(key);
    GLINT_CHECK(it != j.end(), path, ": missing field '", key, "'");
    return *it;
  };
  GLINT_CHECK(get("peft_type") == "LORA", path, ": peft_type must be \"LORA\", got ",
              get("peft_type").dump());
  LoraOptions o;
  // As PEFT does, names that match nothing in this model are passed over; the weights
  // file is then checked key by key against the sites that did match.
  o.all_targets = true;
  GLINT_CHECK(get("r").is_number_integer(), path, ": field 'r' must be an integer");
  o.r = get("r").get<int64_t>();
  GLINT_CHECK(get("lora_alpha").is_number(), path, ": field 'lora_alpha' must be a number");
  o.alpha = get("lora_alpha").get<double>();
  if (j.contains("use_rslora") && j["use_rslora"].is_boolean()) o.use_rslora = j["use_rslora"];
  if (j.contains("lora_dropout") && j["lora_dropout"].is_number()) o.dropout = j["lora_dropout"].get<double>();
  for (const char* k : {"rank_pattern", "alpha_pattern"})
    GLINT_CHECK(!j.contains(k) || j[k].is_null() || j[k].empty(), path, ": field '", k,
                "' is not supported (per-module ranks)");
  GLINT_CHECK(!j.contains("use_dora") || j["use_dora"] != true, path, ": DoRA is not supported");
  o.target_modules.clear();
  o.target_parameters.clear();
  auto tm = get("target_modules");
  if (tm.is_string()) tm = nlohmann::json::array({tm});
  GLINT_CHECK(tm.is_array() || tm.is_null(), path, ": field 'target_modules' must be a list");
  if (tm.is_array())
    for (const auto& t : tm) {
      GLINT_CHECK(t.is_string(), path, ": target_modules entries must be strings");
      o.target_modules.push_back(t.get<std::string>());
    }
  auto ex = j.find("exclude_modules");
  if (ex != j.end() && !ex->is_null()) {
    nlohmann::json list = ex->is_string() ? nlohmann::json::array({*ex}) : *ex;
    GLINT_CHECK(list.is_array(), path, ": field 'exclude_modules' must be a list");
    for (const auto& t : list) {
      GLINT_CHECK(t.is_string(), path, ": exclude_modules entries must be strings");
      o.exclude_modules.push_back(t.get<std::string>());
    }
  }
  if (j.contains("target_parameters") && j["target_parameters"].is_array())
    for (const auto& t : j["target_parameters"]) {
      GLINT_CHECK(t.is_string(), path, ": target_parameters entries must be strings");
      std::string name = t.get<std::string>();
      o.target_parameters.push_back(name.substr(name.rfind('.') + 1));
    }
  o.validate(path);
  return o;
}

void save_adapter(const std::string& dir, LoraModel& lora, const std::string& base) {
  make_dirs(dir);
  write_safetensors(dir + "/" + kWeightsFile, peft_state_dict(lora), {{"format", "pt"}});
  write_text_atomic(dir + "/" + kConfigFile, adapter_config_json(lora.options, adapter_family(lora), base).dump(2) + "\n");
}

void read_adapter_weights(const std::string& dir, LoraModel& lora, const CausalLMImpl& model) {
  const std::string wpath = dir + "/" + kWeightsFile;
  SafetensorsFile file(wpath);
  // Every tensor is read and checked before any is written: a bad file changes nothing.
  std::vector<std::pair<at::Tensor*, at::Tensor>> reads;
  std::set<std::string> used;
  for (auto& s : lora.sites) {
    for (bool is_A : {true, false}) {
      std::string key = peft_key(lora, s, is_A);
      GLINT_CHECK(file.contains(key), wpath, ": missing key '", key, "'");
      at::Tensor t = file.read(key);
      at::Tensor& dst = is_A ? s.A() : s.B();
      if (s.experts) {
        // The file holds every expert; this model may hold a slice (expert parallelism).
        int64_t E = model.config.num_experts, local = dst.size(0);
        int64_t first = s.first_expert;
        std::vector<int64_t> all = dst.sizes().vec();
        all[0] = E;
        at::Tensor expect = is_A ? expert_A_to_peft(at::empty(all)) : expert_B_to_peft(at::empty(all));
        GLINT_CHECK(t.sizes() == expect.sizes(), wpath, ": key '", key, "' has shape ", t.sizes(),
                    ", expected ", expect.sizes());
        t = (is_A ? expert_A_from_peft(t, E) : expert_B_from_peft(t, E)).narrow(0, first, local);
      }
      GLINT_CHECK(t.sizes() == dst.sizes(), wpath, ": key '", key, "' has shape ", t.sizes(),
                  ", expected ", dst.sizes());
      reads.emplace_back(&dst, t);
      used.insert(key);
    }
  }
  for (const auto& key : file.keys())
    GLINT_CHECK(used.count(key), wpath, ": unexpected key '", key,
                "' (not a LoRA site of this model with this adapter_config.json)");
  file.check_unchanged();
  at::NoGradGuard no_grad;
  for (auto& [dst, t] : reads) dst->copy_(t);
}

std::string adapter_base_model(const std::string& dir) {
  const std::string path = dir + "/" + kConfigFile;
  if (!path_exists(path)) return "";
  nlohmann::json j = nlohmann::json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.value("base_model_name_or_path", nlohmann::json()).is_string()) return "";
  return j["base_model_name_or_path"].get<std::string>();
}

LoraModel load_adapter(const std::string& dir, CausalLMImpl& model) {
  LoraOptions o = lora_options_from_adapter_config(dir + "/" + kConfigFile);
  // An adapter that does not fit was most likely trained on another model: every such
  // error says which one.
  auto another_model = [&](const Error& e) {
    const std::string base = adapter_base_model(dir);
    fail(e.what(), base.empty() ? std::string()
                                : "; the adapter was trained on " + base + " (adapter_config.json "
                                  "base_model_name_or_path), and this model is a " + model.config.model_type +
                                  " with hidden_size " + std::to_string(model.config.hidden_size) + " and " +
                                  std::to_string(model.config.num_hidden_layers) + " layers");
  };
  // The router biases are checked before anything changes: a bad file leaves the model as it was.
  std::vector<std::pair<at::Tensor, at::Tensor>> biases;  // (the model's buffer, its saved value)
  const std::string bpath = dir + "/" + kRouterBiasesFile;
  try {
    if (path_exists(bpath)) {
      SafetensorsFile file(bpath);
      std::set<std::string> known;
      for (auto& [name, bias] : router_biases(model)) {
        known.insert(name);
        GLINT_CHECK(file.contains(name), bpath, ": missing key '", name, "'");
        at::Tensor t = file.read(name);
        GLINT_CHECK(t.sizes() == bias.sizes(), bpath, ": key '", name, "' has shape ", t.sizes(), ", expected ",
                    bias.sizes());
        biases.emplace_back(bias, t);
      }
      for (const auto& key : file.keys())
        GLINT_CHECK(known.count(key), bpath, ": unexpected key '", key, "' (not a router bias of this model)");
    }
  } catch (const Error& e) {
    another_model(e);
  }
  // Attached, then filled: a weights file that does not fit takes the adapters off again
  // and unfreezes what apply_lora froze, so a refused adapter leaves the model as it was.
  std::vector<bool> trainable;
  for (const auto& p : model.parameters()) trainable.push_back(p.requires_grad());
  LoraModel lora;
  try {
    lora = apply_lora(model, o, /*seed=*/0);
    read_adapter_weights(dir, lora, model);
  } catch (const Error& e) {
    lora.detach_from(model);
    size_t i = 0;
    for (auto& p : model.parameters()) p.set_requires_grad(trainable[i++]);
    another_model(e);
  }
  for (auto& [bias, value] : biases) bias.copy_(value);
  return lora;
}

}  // namespace glint
