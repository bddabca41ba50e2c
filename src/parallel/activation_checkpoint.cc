#include "parallel/activation_checkpoint.h"

namespace glint {

std::vector<at::Tensor> layer_trainable_tensors(CausalLMImpl& model, int64_t index,
                                                const std::vector<at::Tensor>& extra) {
  std::vector<at::Tensor> out;
  for (const auto& p : model.layer(index)->parameters())
    if (p.requires_grad()) out.push_back(p);
  for (const auto& t : extra)
    if (t.requires_grad()) out.push_back(t);
  return out;
}

}  // namespace glint
