#include "lora/lora.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/compat.h"
#include "core/error.h"
#include "model/causal_lm.h"

namespace glint {

namespace {

const std::vector<std::string> kLinearTargets = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
const std::vector<std::string> kExpertTargets = {"gate_up_proj", "down_proj"};

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

double LoraOptions::scale() const {
  return use_rslora ? alpha / std::sqrt(double(r)) : alpha / double(r);
}

void LoraOptions::parse_targets(const std::string& list, const std::string& what,
                                LoraOptions* out) {
  out->target_modules.clear();
  out->target_parameters.clear();
  out->all_targets = false;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    if (item == "all") {
      out->all_targets = true;
      out->target_modules = kLinearTargets;
      out->target_parameters = kExpertTargets;
    } else if (item.rfind("experts.", 0) == 0 && contains(kExpertTargets, item.substr(8))) {
      if (!contains(out->target_parameters, item.substr(8)))
        out->target_parameters.push_back(item.substr(8));
    } else if (contains(kLinearTargets, item)) {
      if (!contains(out->target_modules, item)) out->target_modules.push_back(item);
    } else {
      usage_fail(what, ": unknown LoRA target '", item, "' (expected q_proj, k_proj, v_proj, o_proj, "
           "gate_proj, up_proj, down_proj, experts.gate_up_proj, experts.down_proj or all)");
    }
  }
  GLINT_USAGE_CHECK(!out->target_modules.empty() || !out->target_parameters.empty(), what,
              ": no LoRA targets in '", list, "'");
}

std::string LoraOptions::targets_string() const {
  std::string s;
  for (const auto& t : target_modules) s += (s.empty() ? "" : ",") + t;
  for (const auto& t : target_parameters) s += (s.empty() ? "" : ",") + ("experts." + t);
  return s;
}

void LoraOptions::validate(const std::string& where) const {
  GLINT_CHECK(r > 0, where, ": LoRA rank r must be positive, got ", r);
  GLINT_CHECK(std::isfinite(alpha) && alpha > 0, where, ": LoRA alpha must be positive, got ", alpha);
  GLINT_CHECK(dropout >= 0 && dropout < 1, where, ": LoRA dropout must be in [0, 1), got ", dropout);
  for (const auto& t : target_modules)
    GLINT_CHECK(contains(kLinearTargets, t), where, ": unknown target module '", t, "'");
  for (const auto& t : target_parameters)
    GLINT_CHECK(contains(kExpertTargets, t), where, ": unknown target parameter '", t, "'");
}

LoraLinear::LoraLinear(at::Tensor A_, at::Tensor B_, double s, double p)
    : A(std::move(A_)), B(std::move(B_)), scale(s), dropout(p) {}

at::Tensor LoraLinear::delta(const at::Tensor& x) const {
  auto dt = x.scalar_type();
  // Drawn from the default generator: recompute (parallel/recompute.cc) replays its state.
  const at::Tensor in = training && dropout > 0 ? at::dropout(x, dropout, /*train=*/true) : x;
  return at::linear(at::linear(in, A.to(dt)), B.to(dt)) * scale;  // [..., out]
}

LoraExperts::LoraExperts(at::Tensor A_, at::Tensor B_, double s)
    : A(std::move(A_)), B(std::move(B_)), scale(s) {}

at::Tensor LoraExperts::delta(const at::Tensor& x, const std::vector<int64_t>& counts, const at::Tensor&) const {
  auto dt = x.scalar_type();
  // Through [n_e, r] per expert: ΔW_e is never formed.
  at::Tensor low = compat::grouped_matmul(x, A.to(dt), counts);  // [N, r]
  return compat::grouped_matmul(low, B.to(dt), counts) * scale;  // [N, out]
}

std::vector<std::pair<std::string, at::Tensor>> LoraModel::named_parameters() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& s : sites) {
    std::string base = s.module_path + (s.parameter.empty() ? "" : "." + s.parameter);
    out.emplace_back(base + ".lora_A", s.A());
    out.emplace_back(base + ".lora_B", s.B());
  }
  return out;
}

std::vector<at::Tensor> LoraModel::parameters() {
  std::vector<at::Tensor> out;
  for (auto& p : named_parameters()) out.push_back(p.second);
  return out;
}

void LoraModel::train(bool on) {
  for (LoraSite& site : sites)
    if (site.linear) site.linear->training = on;
}

void LoraModel::detach_from(CausalLMImpl& model) {
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l) {
    DecoderLayer layer = model.layer(l);
    for (Linear lin : {layer->self_attn->q_proj, layer->self_attn->k_proj,
                       layer->self_attn->v_proj, layer->self_attn->o_proj})
      lin->adapter.reset();
    if (layer->dense_mlp)
      for (Linear lin : {layer->dense_mlp->gate_proj, layer->dense_mlp->up_proj,
                         layer->dense_mlp->down_proj})
        lin->adapter.reset();
    if (layer->moe) {
      layer->moe->experts->gate_up_adapter.reset();
      layer->moe->experts->down_adapter.reset();
    }
  }
  sites.clear();
}

bool has_adapters(CausalLMImpl& model) {
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l) {
    DecoderLayer layer = model.layer(l);
    for (Linear lin : {layer->self_attn->q_proj, layer->self_attn->k_proj, layer->self_attn->v_proj,
                       layer->self_attn->o_proj})
      if (lin->adapter) return true;
    if (layer->dense_mlp)
      for (Linear lin : {layer->dense_mlp->gate_proj, layer->dense_mlp->up_proj, layer->dense_mlp->down_proj})
        if (lin->adapter) return true;
    if (layer->moe && (layer->moe->experts->gate_up_adapter || layer->moe->experts->down_adapter))
      return true;
  }
  return false;
}

namespace {

// The adapters of `options` for `model`, attached to it when `attach`.
LoraModel build_lora(CausalLMImpl& model, const LoraOptions& options, uint64_t seed, bool attach) {
  options.validate("LoRA options");
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  auto dev = model.placement.device;
  // Adapters are float32 over float32 and narrower bases (their masters: the optimizer
  // updates them in place), float64 over a float64 base.
  const c10::ScalarType dtype = model.placement.dtype == at::kDouble ? at::kDouble : options.dtype;
  double scale = options.scale();
  int64_t r = options.r;
  // A ~ U(-1/sqrt(in), 1/sqrt(in)), drawn on CPU in float32 so the values do not depend
  // on device or dtype; B = 0.
  auto init_A = [&](at::IntArrayRef shape, int64_t in) {
    at::Tensor a = at::empty(shape, at::kFloat);
    double bound = 1.0 / std::sqrt(double(in));
    a.uniform_(-bound, bound, gen);
    return a.to(dev, dtype).set_requires_grad(true);
  };
  auto zeros = [&](at::IntArrayRef shape) {
    return at::zeros(shape, at::TensorOptions().dtype(dtype).device(dev))
        .set_requires_grad(true);
  };
  LoraModel lm;
  lm.options = options;
  std::vector<bool> module_used(options.target_modules.size(), false);
  std::vector<bool> param_used(options.target_parameters.size(), false);
  auto attach_linear = [&](Linear lin, const std::string& path, const std::string& name) {
    auto it = std::find(options.target_modules.begin(), options.target_modules.end(), name);
    if (it == options.target_modules.end()) return;
    module_used[it - options.target_modules.begin()] = true;
    auto ad = std::make_shared<LoraLinear>(init_A({r, lin->in_features()}, lin->in_features()),
                                           zeros({lin->out_features(), r}), scale, options.dropout);
    if (attach) lin->adapter = ad;
    lm.sites.push_back({path + "." + name, "", ad, nullptr});
  };
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l) {
    DecoderLayer layer = model.layer(l);
    std::string lp = "model.layers." + std::to_string(l);
    auto& at_ = layer->self_attn;
    attach_linear(at_->q_proj, lp + ".self_attn", "q_proj");
    attach_linear(at_->k_proj, lp + ".self_attn", "k_proj");
    attach_linear(at_->v_proj, lp + ".self_attn", "v_proj");
    attach_linear(at_->o_proj, lp + ".self_attn", "o_proj");
    if (layer->dense_mlp) {
      attach_linear(layer->dense_mlp->gate_proj, lp + ".mlp", "gate_proj");
      attach_linear(layer->dense_mlp->up_proj, lp + ".mlp", "up_proj");
      attach_linear(layer->dense_mlp->down_proj, lp + ".mlp", "down_proj");
    }
    if (layer->moe) {
      ExpertsImpl& ex = *layer->moe->experts;
      int64_t E = ex.num_local(), I = ex.intermediate(), H = ex.gate_up_proj.size(2);
      // Registration order of the experts module: gate_up_proj, then down_proj.
      for (size_t k = 0; k < kExpertTargets.size(); ++k) {
        const std::string& name = kExpertTargets[k];
        auto it = std::find(options.target_parameters.begin(), options.target_parameters.end(), name);
        if (it == options.target_parameters.end()) continue;
        param_used[it - options.target_parameters.begin()] = true;
        GLINT_USAGE_CHECK(options.dropout == 0, "LoRA dropout ", options.dropout, " with the expert target ",
                          name, ": PEFT's target_parameters LoRA (ParamWrapper) refuses adapters with "
                          "lora_dropout != 0, so the adapter could not be loaded; leave experts.* out of the "
                          "targets, or use --lora-dropout 0");
        int64_t in = name == "gate_up_proj" ? H : I, out = name == "gate_up_proj" ? 2 * I : H;
        // A is drawn for all experts and sliced to the local ones (expert parallelism), so
        // every mesh starts from the same adapter.
        at::Tensor A = init_A({model.config.num_experts, r, in}, in)
                           .detach()
                           .narrow(0, ex.first_expert, E)
                           .clone()
                           .set_requires_grad(true);
        auto ad = std::make_shared<LoraExperts>(A, zeros({E, out, r}), scale);
        if (attach && name == "gate_up_proj") ex.gate_up_adapter = ad;
        else if (attach) ex.down_adapter = ad;
        lm.sites.push_back({lp + ".mlp.experts", name, nullptr, ad});
      }
    }
  }
  if (options.all_targets) {  // keep only the targets this model has
    lm.options.target_modules.clear();
    lm.options.target_parameters.clear();
    for (size_t i = 0; i < module_used.size(); ++i)
      if (module_used[i]) lm.options.target_modules.push_back(options.target_modules[i]);
    for (size_t i = 0; i < param_used.size(); ++i)
      if (param_used[i]) lm.options.target_parameters.push_back(options.target_parameters[i]);
    lm.options.all_targets = false;
    return lm;
  }
  for (size_t i = 0; i < module_used.size(); ++i)
    GLINT_CHECK(module_used[i], "LoRA target module '", options.target_modules[i],
                "' matches no module of this ", model.config.model_type, " model");
  for (size_t i = 0; i < param_used.size(); ++i)
    GLINT_CHECK(param_used[i], "LoRA target parameter '", options.target_parameters[i],
                "' matches no parameter of this ", model.config.model_type,
                " model (it has no MoE layers)");
  return lm;
}

}  // namespace

LoraModel apply_lora(CausalLMImpl& model, const LoraOptions& options, uint64_t seed) {
  GLINT_CHECK(!has_adapters(model), "LoRA: the model already has adapters attached; detach them first");
  {
    at::NoGradGuard no_grad;
    for (auto& p : model.parameters()) p.set_requires_grad(false);
  }
  return build_lora(model, options, seed, /*attach=*/true);
}

LoraModel make_lora(CausalLMImpl& model, const LoraOptions& options, uint64_t seed) {
  return build_lora(model, options, seed, /*attach=*/false);
}

}  // namespace glint
