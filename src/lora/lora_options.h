// What a LoRA adapter is, as options: rank, scale, dropout and the targets it adapts
// (lora/lora.h applies them to a model); a tenant's adapter (lora/tenants.h) adds a name
// and a seed. No libtorch here beyond the dtype's enum.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

namespace glint {

struct LoraOptions {
  int64_t r = 16;                 // rank
  double alpha = 32.0;            // scale = alpha / r (alpha / sqrt(r) with rsLoRA)
  bool use_rslora = false;
  double dropout = 0.0;           // PEFT lora_dropout: on the adapter's input, in training
                                  // only; linear targets (PEFT refuses it on expert ones)
  // Linear module names (PEFT target_modules: a module matches a name equal to its path
  // or ending in "." + name), or "all-linear": every linear of the decoder layers (the
  // output head is never adapted). Each family lists its names (ModelFamily::lora_targets).
  std::vector<std::string> target_modules = {"all-linear"};
  // Linear module names left out (PEFT exclude_modules, matched as target_modules).
  std::vector<std::string> exclude_modules;
  // Packed expert parameters (PEFT target_parameters): gate_up_proj, down_proj.
  std::vector<std::string> target_parameters = {"gate_up_proj", "down_proj"};
  c10::ScalarType dtype = c10::kFloat;  // adapter weights' dtype (float64 over a float64 model)
  // true: the lists name every supported target and apply_lora keeps those the model
  // has (a dense model has no expert targets). false: each listed target must match.
  bool all_targets = true;

  double scale() const;
  // Splits a CLI list: "q_proj,v_proj,experts.gate_up_proj,experts.down_proj";
  // "all-linear" is every linear, "all" every linear and expert tensor (the default).
  // A name no registered family has throws glint::Error naming `what` and the name.
  static void parse_targets(const std::string& list, const std::string& what, LoraOptions* out);
  // Splits a CLI list of module names to leave out (--lora-exclude), checked as above.
  static void parse_excludes(const std::string& list, const std::string& what, LoraOptions* out);
  std::string targets_string() const;  // inverse of parse_targets
  void validate(const std::string& where) const;
};

struct TenantOptions {
  std::string name;  // letters, digits, '-', '_', '.'; names OUT/<name>/
  LoraOptions lora;  // rank, alpha, rsLoRA, targets
  uint64_t seed = 0; // adapter initialisation (apply_lora's seed)
  void validate(int64_t r_max) const;  // throws glint::Error naming the tenant and value
};

}  // namespace glint
