#include "lora/lora.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/compat.h"
#include "core/error.h"
#include "model/adaptable.h"
#include "model/causal_lm.h"
#include "model/family.h"

namespace glint {

namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The target names of every registered family: a name none of them has is a typo.
std::vector<std::string> known_targets() {
  std::vector<std::string> out;
  for (const ModelFamily* f : model_families())
    for (const std::string& t : f->lora_targets())
      if (!contains(out, t)) out.push_back(t);
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& t : v) s += (s.empty() ? "" : ", ") + t;
  return s;
}

// Items of a comma-separated list, trimmed, empty ones dropped.
std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// PEFT's match of a module name against a target: equal, or a suffix after a dot.
bool matches(const std::string& path, const std::string& target) {
  return path == target ||
         (path.size() > target.size() && path.compare(path.size() - target.size(), target.size(), target) == 0 &&
          path[path.size() - target.size() - 1] == '.');
}

constexpr const char* kAllLinear = "all-linear";
const std::vector<std::string> kExpertParameters = {"gate_up_proj", "down_proj"};

}  // namespace

double LoraOptions::scale() const {
  return use_rslora ? alpha / std::sqrt(double(r)) : alpha / double(r);
}

void LoraOptions::parse_targets(const std::string& list, const std::string& what, LoraOptions* out) {
  out->target_modules.clear();
  out->target_parameters.clear();
  out->all_targets = false;
  const std::vector<std::string> known = known_targets();
  for (const std::string& item : split_list(list)) {
    if (item == "all" || item == kAllLinear) {
      out->all_targets = true;
      if (!contains(out->target_modules, kAllLinear)) out->target_modules.push_back(kAllLinear);
      if (item == "all")
        for (const auto& p : kExpertParameters)
          if (!contains(out->target_parameters, p)) out->target_parameters.push_back(p);
    } else if (const std::string p = expert_target_parameter(item); contains(kExpertParameters, p)) {
      if (!contains(out->target_parameters, p)) out->target_parameters.push_back(p);
    } else if (contains(known, item)) {
      if (!contains(out->target_modules, item)) out->target_modules.push_back(item);
    } else {
      usage_fail(what, ": unknown LoRA target '", item, "' (expected all, all-linear or one of ", joined(known), ")");
    }
  }
  GLINT_USAGE_CHECK(!out->target_modules.empty() || !out->target_parameters.empty(), what,
                    ": no LoRA targets in '", list, "'");
}

void LoraOptions::parse_excludes(const std::string& list, const std::string& what, LoraOptions* out) {
  out->exclude_modules.clear();
  const std::vector<std::string> known = known_targets();
  for (const std::string& item : split_list(list)) {
    GLINT_USAGE_CHECK(contains(known, item) && expert_target_parameter(item).empty(), what, ": unknown module '", item,
                      "' to leave out (expected one of the linear targets: ", joined(known), ")");
    if (!contains(out->exclude_modules, item)) out->exclude_modules.push_back(item);
  }
}

std::string LoraOptions::targets_string() const {
  std::string s;
  for (const auto& t : target_modules) s += (s.empty() ? "" : ",") + t;
  for (const auto& t : target_parameters) s += (s.empty() ? "" : ",") + expert_target(t);
  return s;
}

void LoraOptions::validate(const std::string& where) const {
  GLINT_CHECK(r > 0, where, ": LoRA rank r must be positive, got ", r);
  GLINT_CHECK(std::isfinite(alpha) && alpha > 0, where, ": LoRA alpha must be positive, got ", alpha);
  GLINT_CHECK(dropout >= 0 && dropout < 1, where, ": LoRA dropout must be in [0, 1), got ", dropout);
  for (const auto& t : target_parameters)
    GLINT_CHECK(contains(kExpertParameters, t), where, ": unknown target parameter '", t, "'");
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

std::vector<bool> LoraModel::expert_parameters() const {
  std::vector<bool> out;
  for (const auto& s : sites) out.insert(out.end(), 2, bool(s.experts));
  return out;
}

std::vector<at::Tensor> LoraModel::layer_parameters(int64_t layer) {
  std::vector<at::Tensor> out;
  for (auto& s : sites)
    if (s.layer == layer) {
      out.push_back(s.A());
      out.push_back(s.B());
    }
  return out;
}

void LoraModel::train(bool on) {
  for (LoraSite& site : sites)
    if (site.linear) site.linear->training = on;
}

void LoraModel::detach_from(CausalLMImpl& model) {
  for_each_adaptable(model, [](const Adaptable& a) {
    if (a.linear) a.linear->adapter.reset();
    else a.expert_adapter().reset();
  });
  sites.clear();
}

bool has_adapters(CausalLMImpl& model) {
  bool any = false;
  for_each_adaptable(model, [&](const Adaptable& a) { any |= a.linear ? bool(a.linear->adapter) : bool(a.expert_adapter()); });
  return any;
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
  lm.family = model.family;
  const bool all_linear = contains(options.target_modules, kAllLinear);
  std::vector<bool> module_used(options.target_modules.size(), false);
  std::vector<bool> param_used(options.target_parameters.size(), false);
  std::vector<std::string> linear_names;  // matched linear names, in model order
  std::vector<std::string> present;       // every adaptable name of this model, in model order
  for_each_adaptable(model, [&](const Adaptable& a) {
    const std::string name = a.target();
    if (!contains(present, name)) present.push_back(name);
    if (a.linear) {
      bool wanted = all_linear;
      for (size_t i = 0; i < options.target_modules.size(); ++i)
        if (matches(a.module_path, options.target_modules[i])) wanted = module_used[i] = true;
      if (!wanted) return;
      for (const auto& ex : options.exclude_modules)
        if (matches(a.module_path, ex)) return;
      if (all_linear) module_used[std::find(options.target_modules.begin(), options.target_modules.end(), kAllLinear) -
                                  options.target_modules.begin()] = true;
      if (!contains(linear_names, a.module_name)) linear_names.push_back(a.module_name);
      const int64_t in = a.in_features();
      auto ad = std::make_shared<LoraLinear>(init_A({r, in}, in), zeros({a.out_features(), r}), scale, options.dropout);
      if (attach) a.linear->adapter = ad;
      LoraSite site{a.module_path, "", ad, nullptr};
      site.layer = a.layer;
      lm.sites.push_back(std::move(site));
      return;
    }
    auto it = std::find(options.target_parameters.begin(), options.target_parameters.end(), a.parameter);
    if (it == options.target_parameters.end()) return;
    param_used[it - options.target_parameters.begin()] = true;
    GLINT_USAGE_CHECK(options.dropout == 0, "LoRA dropout ", options.dropout, " with the expert target ", a.parameter,
                      ": PEFT's target_parameters LoRA (ParamWrapper) refuses adapters with lora_dropout != 0, so "
                      "the adapter could not be loaded; leave the expert targets out, or use --lora-dropout 0");
    const ExpertsImpl& ex = *a.experts;
    const int64_t E = ex.num_local(), in = a.in_features(), out = a.out_features();
    // A is drawn for all experts and sliced to the local ones (expert parallelism), so
    // every mesh starts from the same adapter.
    at::Tensor A = init_A({model.config.num_experts, r, in}, in)
                       .detach()
                       .narrow(0, ex.first_expert, E)
                       .clone()
                       .set_requires_grad(true);
    auto ad = std::make_shared<LoraExperts>(A, zeros({E, out, r}), scale);
    if (attach) a.expert_adapter() = ad;
    LoraSite site{a.module_path, a.parameter, nullptr, ad};
    site.layer = a.layer;
    site.first_expert = ex.first_expert;
    lm.sites.push_back(std::move(site));
  });
  if (options.all_targets) {  // keep only the targets this model has, by name
    lm.options.target_modules.clear();
    for (size_t i = 0; i < module_used.size(); ++i)
      if (module_used[i] && options.target_modules[i] != kAllLinear) lm.options.target_modules.push_back(options.target_modules[i]);
    for (const auto& n : linear_names)
      if (all_linear && !contains(lm.options.target_modules, n)) lm.options.target_modules.push_back(n);
    lm.options.target_parameters.clear();
    for (size_t i = 0; i < param_used.size(); ++i)
      if (param_used[i]) lm.options.target_parameters.push_back(options.target_parameters[i]);
    lm.options.all_targets = false;
    return lm;
  }
  // What this model has, not what its family may have: a family's dense-MLP names are
  // absent from a model whose every layer is MoE, its expert tensors from a dense one.
  const std::string valid = joined(present);
  auto why_absent = [&](const std::string& target) {
    return contains(model.family->lora_targets(), target)
               ? "'" + target + "' is a module of " + model.config.model_type + " models, but this one has none"
               : "'" + target + "' is no module of " + model.config.model_type + " models";
  };
  for (size_t i = 0; i < module_used.size(); ++i)
    GLINT_CHECK(module_used[i], "LoRA target module '", options.target_modules[i], "' matches no module of this ",
                model.config.model_type, " model: ", why_absent(options.target_modules[i]),
                " (this model's targets: ", valid, ")");
  for (size_t i = 0; i < param_used.size(); ++i)
    GLINT_CHECK(param_used[i], "LoRA target parameter '", options.target_parameters[i],
                "' matches no parameter of this ", model.config.model_type, " model: it has no MoE layers",
                " (this model's targets: ", valid, ")");
  if (all_linear) {  // the saved config names the modules, as PEFT writes it
    std::vector<std::string> named;
    for (const auto& t : options.target_modules)
      if (t != kAllLinear) named.push_back(t);
    for (const auto& n : linear_names)
      if (!contains(named, n)) named.push_back(n);
    lm.options.target_modules = named;
  }
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
