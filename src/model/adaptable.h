// The one walk over a model's adaptable tensors: every linear projection of the decoder
// layers and every packed expert tensor, each with its PEFT module name. LoRA, the
// multi-tenant bank, adapter export and the FLOP count all visit the model through it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "model/adapter.h"

namespace glint {

class CausalLMImpl;
class LinearImpl;
class ExpertsImpl;

// glint's LoRA target syntax for a packed expert tensor, whatever a family's release calls
// its experts: "experts.<parameter>" ("experts.gate_up_proj", "experts.down_proj"), as
// --lora-targets, lora_targets() and the service take it.
inline constexpr const char* kExpertTargetPrefix = "experts.";
std::string expert_target(const std::string& parameter);
// The parameter an expert target names ("gate_up_proj" for "experts.gate_up_proj"); "" when
// `target` is not an expert target.
std::string expert_target_parameter(const std::string& target);

struct Adaptable {
  std::string module_path;  // PEFT module name: "model.layers.0.self_attn.q_proj",
                            // "model.layers.0.mlp.experts"
  std::string module_name;  // its last part: "q_proj", "experts"
  std::string parameter;    // "" for a linear; "gate_up_proj" / "down_proj" for expert tensors
  int64_t layer = -1;       // decoder layer
  LinearImpl* linear = nullptr;    // set for a linear
  ExpertsImpl* experts = nullptr;  // set for an expert tensor

  // The LoRA target name: module_name for a linear, expert_target(parameter) for experts.
  std::string target() const;
  int64_t in_features() const;   // per expert for experts
  int64_t out_features() const;
  // The adapter slot of an expert tensor. REQUIRES: experts.
  std::shared_ptr<ExpertAdapter>& expert_adapter() const;
};

// Calls fn for every adaptable tensor of the decoder layers, in module registration order
// (layer by layer; within an experts module gate_up_proj, then down_proj). The output
// head and the routers are not adaptable.
void for_each_adaptable(CausalLMImpl& model, const std::function<void(const Adaptable&)>& fn);

}  // namespace glint
