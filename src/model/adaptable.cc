#include "model/adaptable.h"

#include "core/error.h"
#include "model/causal_lm.h"
#include "model/moe.h"

namespace glint {

std::string expert_target(const std::string& parameter) { return kExpertTargetPrefix + parameter; }

std::string expert_target_parameter(const std::string& target) {
  const std::string prefix = kExpertTargetPrefix;
  return target.size() > prefix.size() && target.compare(0, prefix.size(), prefix) == 0 ? target.substr(prefix.size())
                                                                                        : "";
}

std::string Adaptable::target() const { return experts ? expert_target(parameter) : module_name; }

int64_t Adaptable::in_features() const {
  if (linear) return linear->in_features();
  return experts->in_features(parameter == "gate_up_proj" ? PackedExpert::kGateUp : PackedExpert::kDown);
}

int64_t Adaptable::out_features() const {
  if (linear) return linear->out_features();
  return experts->out_features(parameter == "gate_up_proj" ? PackedExpert::kGateUp : PackedExpert::kDown);
}

std::shared_ptr<ExpertAdapter>& Adaptable::expert_adapter() const {
  GLINT_ASSERT(experts, module_path, " is not an expert tensor");
  return parameter == "gate_up_proj" ? experts->gate_up_adapter : experts->down_adapter;
}

namespace {

void walk(torch::nn::Module& module, const std::string& path, const std::string& name, int64_t layer,
          const std::function<void(const Adaptable&)>& fn) {
  Adaptable a;
  a.module_path = path;
  a.module_name = name;
  a.layer = layer;
  if ((a.linear = dynamic_cast<LinearImpl*>(&module))) return fn(a);
  if ((a.experts = dynamic_cast<ExpertsImpl*>(&module))) {
    for (const char* parameter : {"gate_up_proj", "down_proj"}) {
      a.parameter = parameter;
      fn(a);
    }
    return;
  }
  for (const auto& child : module.named_children())
    walk(*child.value(), path + "." + child.key(), child.key(), layer, fn);
}

}  // namespace

void for_each_adaptable(CausalLMImpl& model, const std::function<void(const Adaptable&)>& fn) {
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l)
    walk(*model.layer(l), "model.layers." + std::to_string(l), std::to_string(l), l, fn);
}

}  // namespace glint
