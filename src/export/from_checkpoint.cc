#include "export/from_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "core/staged_dir.h"
#include "dist/comm.h"
#include "dist/world.h"
#include "core/fs.h"
#include "io/safetensors.h"
#include "io/sharded_state.h"
#include "lora/peft_io.h"
#include "model/causal_lm.h"
#include "model/weights.h"
#include "train/run_checkpoint.h"
#include "train/run_dir.h"

namespace glint {


namespace {

// The options a checkpoint's identity records for its adapter (train/trainer_checkpoint.cc).
LoraOptions lora_options(const nlohmann::json& j, double dropout) {
  LoraOptions o;
  o.r = j.at("r").get<int64_t>();
  o.alpha = j.at("alpha").get<double>();
  o.use_rslora = j.at("rslora").get<bool>();
  o.target_modules = j.at("target_modules").get<std::vector<std::string>>();
  o.exclude_modules = j.at("exclude_modules").get<std::vector<std::string>>();
  o.target_parameters = j.at("target_parameters").get<std::vector<std::string>>();
  o.dropout = dropout;
  return o;
}

const nlohmann::json& run_info(const CheckpointDir& ckpt) {
  static const nlohmann::json none = nlohmann::json::object();
  return ckpt.manifest.contains("run") && ckpt.manifest["run"].is_object() ? ckpt.manifest["run"] : none;
}

// The ways `model` differs from the model a checkpoint trained, as "field: saved X, now Y";
// the training-only fields (the load-balancing loss, the dtype) are not the model's shape.
std::vector<std::string> model_differences(const CheckpointDir& ckpt, const CausalLMImpl& model) {
  std::vector<std::string> out;
  for (const std::string& d :
       identity_differences(ckpt.manifest.at("identity").at("model"), model.family->to_json(model.config))) {
    bool training_only = false;
    for (const char* f : {"output_router_logits", "router_aux_loss_coef", "torch_dtype", "dtype", "use_cache"})
      training_only = training_only || d.rfind(std::string(f) + ":", 0) == 0;
    if (!training_only) out.push_back(d);
  }
  return out;
}

std::string joined_lines(const std::vector<std::string>& lines, size_t most = 6) {
  std::string s;
  for (size_t i = 0; i < lines.size() && i < most; ++i) s += "\n  " + lines[i];
  if (lines.size() > most) s += "\n  ... (" + std::to_string(lines.size() - most) + " more)";
  return s;
}

// The saved shape of every logical tensor under `prefix` ("param/", "param/<tenant>/").
std::map<std::string, std::vector<int64_t>> saved_shapes(const CheckpointDir& ckpt, const std::string& prefix) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& p : ckpt.manifest.at("pieces")) {
    const std::string name = p.at("name");
    if (name.rfind(prefix, 0) == 0) out[name] = p.at("shape").get<std::vector<int64_t>>();
  }
  return out;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// A model of the checkpoint's config without its base weights (their pages stay
// unmapped): enough for the adapter's sites and shapes.
CausalLM checkpoint_model_shape(const CheckpointDir& ckpt) {
  const nlohmann::json& id = ckpt.manifest.at("identity");
  ModelConfig config = ModelConfig::from_json(id.at("model"), ckpt.dir + "/manifest.json identity.model");
  c10::ScalarType dtype = c10::kFloat;
  const std::string saved = id.value("dtype", std::string("Float"));
  if (saved == "BFloat16") dtype = c10::kBFloat16;
  else if (saved == "Double") dtype = c10::kDouble;
  else if (saved == "Half") dtype = c10::kHalf;
  TensorPlacement place{dtype, c10::Device(c10::kCPU)};
  place.lazy = true;
  return CausalLM(config, place);
}

}  // namespace

bool is_checkpoint_path(const std::string& path) {
  return !path_exists(path + "/adapter_config.json") &&
         (path_exists(path + "/manifest.json") || path_exists(path + "/checkpoints"));
}

CheckpointTraining checkpoint_training(const CheckpointDir& ckpt) {
  CheckpointTraining t;
  const nlohmann::json& id = ckpt.manifest.at("identity");
  t.kind = id.value("training", std::string("lora"));
  if (id.contains("tenants"))
    for (auto it = id["tenants"].begin(); it != id["tenants"].end(); ++it) t.tenants.push_back(it.key());
  const nlohmann::json& run = run_info(ckpt);
  t.base_model = run.value("base_model", std::string());
  if (t.base_model.empty()) {
    // Checkpoints of earlier versions: the run's config.toml names the model.
    const std::string config = ckpt.run_dir + "/config.toml";
    if (path_exists(config)) {
      std::string text = read_file(config);
      for (size_t at = 0; (at = text.find("model=", at)) != std::string::npos; ++at)
        if (at == 0 || text[at - 1] == '\n') {
          size_t end = text.find('\n', at);
          std::string v = text.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
          if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
          t.base_model = v;
          break;
        }
    }
    if (t.base_model.empty()) t.base_model = ckpt.run_dir + "/base-model";
  }
  return t;
}

LoraModel adapter_from_checkpoint(const CheckpointDir& ckpt, CausalLMImpl& model, const std::string& tenant) {
  const CheckpointTraining t = checkpoint_training(ckpt);
  const nlohmann::json& id = ckpt.manifest.at("identity");
  GLINT_CHECK(t.kind != "full", ckpt.dir, " is a full fine-tuning checkpoint: it holds a whole model, not an adapter "
              "(glint export ", ckpt.dir, " --output DIR writes it as a model directory for --model)");
  std::string prefix = "param/";
  nlohmann::json options;
  if (t.kind == "tenants") {
    std::string names;
    for (const auto& n : t.tenants) names += (names.empty() ? "" : ", ") + n;
    GLINT_CHECK(!tenant.empty(), ckpt.dir, " holds the adapters of ", t.tenants.size(), " tenants (", names,
                "): choose one (glint export ", ckpt.dir, " --tenant NAME --output DIR)");
    GLINT_CHECK(id["tenants"].contains(tenant), ckpt.dir, ": no tenant '", tenant, "' (its tenants: ", names, ")");
    options = id["tenants"][tenant];
    prefix += tenant + "/";
  } else {
    GLINT_CHECK(tenant.empty(), ckpt.dir, " is a single adapter's checkpoint: it has no tenant '", tenant, "'");
    options = id.at("lora");
  }
  const nlohmann::json& run = run_info(ckpt);
  const LoraOptions o = lora_options(options, run.value("lora_dropout", 0.0));
  auto wrong_model = [&](const std::string& what) {
    std::vector<std::string> diffs = model_differences(ckpt, model);
    fail(ckpt.dir, " was trained on ", t.base_model, ", not on this model (", model.config.model_type, "): ", what,
         diffs.empty() ? std::string() : "; the models' config.json differ:" + joined_lines(diffs));
  };
  if (model.config.model_type != id.at("model").value("model_type", std::string()))
    wrong_model("its model_type is " + id.at("model").value("model_type", std::string()));
  const std::map<std::string, std::vector<int64_t>> saved = saved_shapes(ckpt, prefix);
  // Attached, then filled: a checkpoint that does not fit takes the adapters off again and
  // unfreezes what apply_lora froze, leaving the model as it was.
  std::vector<bool> trainable;
  for (const auto& p : model.parameters()) trainable.push_back(p.requires_grad());
  LoraModel lora;
  try {
    lora = apply_lora(model, o, /*seed=*/0);
    std::vector<StatePiece> pieces;
    std::set<std::string> used;
    for (auto& [name, tensor] : lora.named_parameters()) {
      const std::string key = prefix + name;
      auto it = saved.find(key);
      if (it == saved.end()) wrong_model("it has no adapter for " + name);
      if (it->second != tensor.sizes().vec())
        wrong_model(name + " is " + shape_text(it->second) + " there, " + shape_text(tensor.sizes().vec()) + " here");
      used.insert(key);
      pieces.push_back(replicated_piece(key, tensor, true));
    }
    for (const auto& [key, shape] : saved)
      if (!used.count(key)) wrong_model("this model has no site for " + key.substr(prefix.size()));
    if (id.value("router_bias_update", false))
      for (auto& [name, bias] : router_biases(model)) pieces.push_back(replicated_piece("buffer/" + name, bias, true));
    at::NoGradGuard no_grad;
    read_checkpoint_pieces(ckpt, pieces);
  } catch (const Error&) {
    lora.detach_from(model);
    size_t i = 0;
    for (auto& p : model.parameters()) p.set_requires_grad(trainable[i++]);
    throw;
  }
  return lora;
}

LoraModel load_adapter_or_checkpoint(const std::string& path, CausalLMImpl& model, const std::string& tenant,
                                     const std::string& flag) {
  if (is_checkpoint_path(path)) {
    CheckpointDir ckpt = find_checkpoint(path);
    try {
      return adapter_from_checkpoint(ckpt, model, tenant);
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      fail(flag, " ", path, ": ", e.what());
    }
  }
  GLINT_USAGE_CHECK(path_exists(path), flag, " ", path, ": no such directory");
  GLINT_CHECK(path_exists(path + "/adapter_config.json"), flag, " ", path,
              ": neither a PEFT adapter directory (no adapter_config.json) nor a glint run or checkpoint directory");
  GLINT_USAGE_CHECK(tenant.empty(), flag, " ", path, " is one adapter: --tenant chooses among a tenant run's");
  try {
    return load_adapter(path, model);
  } catch (const Error& e) {
    fail(flag, " ", path, " does not fit this ", model.config.model_type, " model: ", e.what());
  }
}

ExportReport export_checkpoint(const std::string& path, const std::string& out, const std::string& tenant,
                               bool overwrite) {
  const CheckpointDir ckpt = find_checkpoint(path);
  const CheckpointTraining t = checkpoint_training(ckpt);
  // Every file against its manifest checksum first: a corrupted checkpoint exports nothing.
  verify_checkpoint(*Comm::create(World()), ckpt);
  ExportReport report;
  report.kind = t.kind;
  report.step = ckpt.step();
  const std::string problem = output_dir_problem(out, overwrite);
  GLINT_USAGE_CHECK(problem.empty(), problem);
  StagedDir staging(out, "the export");
  const nlohmann::json& id = ckpt.manifest.at("identity");
  if (t.kind == "full") {
    GLINT_USAGE_CHECK(tenant.empty(), "--tenant: ", ckpt.dir, " is a full fine-tuning checkpoint");
    GLINT_CHECK(path_exists(t.base_model + "/config.json"), ckpt.dir, ": the run's base model ", t.base_model,
                " is not there; a full checkpoint's buffers and untrained tensors come from it");
    CausalLM shape = checkpoint_model_shape(ckpt);
    CausalLM model = from_pretrained(t.base_model, TensorPlacement{shape->placement.dtype, c10::Device(c10::kCPU)});
    std::vector<StatePiece> pieces;
    for (ParameterSite& site : parameter_sites(*model))
      pieces.push_back(replicated_piece("param/" + site.name, site.tensor, true));
    if (id.value("router_bias_update", false))
      for (auto& [name, bias] : router_biases(*model)) pieces.push_back(replicated_piece("buffer/" + name, bias, true));
    {
      at::NoGradGuard no_grad;
      read_checkpoint_pieces(ckpt, pieces);
    }
    save_pretrained(*model, staging.dir());
    copy_tokenizer_files(t.base_model, staging.dir());
    report.dirs.push_back(out);
  } else {
    CausalLM model = checkpoint_model_shape(ckpt);
    std::vector<std::string> tenants = {tenant};
    if (t.kind == "tenants" && tenant.empty()) tenants = t.tenants;
    for (const std::string& name : tenants) {
      const std::string dir = staging.dir() + (t.kind == "tenants" && tenant.empty() ? "/" + name : "");
      LoraModel lora = adapter_from_checkpoint(ckpt, *model, name);
      make_dirs(dir);
      save_adapter(dir, lora, t.base_model);
      if (id.value("router_bias_update", false)) write_safetensors(dir + "/" + kRouterBiasesFile, router_biases(*model));
      lora.detach_from(*model);
      report.dirs.push_back(out + (dir.size() > staging.dir().size() ? "/" + name : ""));
    }
  }
  staging.commit();
  return report;
}

}  // namespace glint
