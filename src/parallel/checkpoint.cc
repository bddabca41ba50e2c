#include "parallel/checkpoint.h"

namespace glint {

std::vector<at::Tensor> layer_trainable_tensors(
    CausalLMImpl& model, int64_t index,
    const std::vector<std::pair<std::string, at::Tensor>>& extra) {
  std::vector<at::Tensor> out;
  for (const auto& p : model.layer(index)->parameters())
    if (p.requires_grad()) out.push_back(p);
  std::string prefix = "model.layers." + std::to_string(index) + ".";
  for (const auto& [name, t] : extra)
    if (name.rfind(prefix, 0) == 0 && t.requires_grad()) out.push_back(t);
  return out;
}

}  // namespace glint
