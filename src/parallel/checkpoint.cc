#include "parallel/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/custom_class.h>

#include "core/error.h"

namespace glint {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs to re-run the layer; kept in the autograd context.
struct LayerCall : torch::CustomClassHolder {
  DecoderLayerImpl* layer = nullptr;
  RotaryTables rope;
  at::Tensor mask;
  bool moe = false;
};

// inputs: {x [B,S,H], trainable tensors...}; outputs: {y [B,S,H], router logits [T,E]
// (MoE layers only)}.
struct CheckpointedLayer : torch::autograd::Function<CheckpointedLayer> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<LayerCall> call,
                               at::TensorList inputs) {
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    ctx->save_for_backward({inputs[0]});
    ctx->saved_data["x_requires_grad"] = inputs[0].requires_grad();
    // The trainable leaves (parameters, adapters): gradients are taken w.r.t. them.
    c10::List<at::Tensor> params;
    for (size_t i = 1; i < inputs.size(); ++i) params.push_back(inputs[i]);
    ctx->saved_data["params"] = params;
    std::vector<at::Tensor> logits;
    at::Tensor y = call->layer->forward(inputs[0], call->rope, call->mask, call->moe ? &logits : nullptr);
    variable_list out{y};
    if (call->moe) out.push_back(logits.at(0));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto call = c10::static_intrusive_pointer_cast<LayerCall>(ctx->saved_data["call"].toCapsule());
    at::Tensor saved_x = ctx->get_saved_variables()[0];
    bool x_grad = ctx->saved_data["x_requires_grad"].toBool();
    at::AutoGradMode grad_on(true);
    at::Tensor x = saved_x.detach().requires_grad_(x_grad);
    std::vector<at::Tensor> logits;
    at::Tensor y = call->layer->forward(x, call->rope, call->mask, call->moe ? &logits : nullptr);
    variable_list outs{y}, grads{grad_out[0]};
    if (call->moe && grad_out.size() > 1 && grad_out[1].defined()) {
      outs.push_back(logits.at(0));
      grads.push_back(grad_out[1]);
    }
    // One gradient per argument of forward: none for `call`, then x and each trainable
    // tensor in order.
    variable_list wrt{x};
    std::vector<size_t> idx;
    c10::List<at::Tensor> params = ctx->saved_data["params"].toTensorList();
    variable_list result(2 + params.size());
    for (size_t i = 0; i < params.size(); ++i) wrt.push_back(params[i]);
    variable_list need;
    for (size_t i = 0; i < wrt.size(); ++i)
      if (wrt[i].requires_grad()) {
        need.push_back(wrt[i]);
        idx.push_back(i);
      }
    if (need.empty()) return result;
    variable_list g = torch::autograd::grad(outs, need, grads, /*retain_graph=*/false,
                                            /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t k = 0; k < idx.size(); ++k) result[1 + idx[k]] = g[k];
    return result;
  }
};

}  // namespace

CheckpointRunner::CheckpointRunner(std::vector<std::vector<at::Tensor>> trainable)
    : trainable_(std::move(trainable)) {}

at::Tensor CheckpointRunner::run(int64_t index, DecoderLayerImpl& layer, const at::Tensor& x,
                                 const RotaryTables& rope, const at::Tensor& mask,
                                 std::vector<at::Tensor>* router_logits) {
  GLINT_ASSERT(index < int64_t(trainable_.size()));
  if (!at::GradMode::is_enabled()) return layer.forward(x, rope, mask, router_logits);
  auto call = c10::make_intrusive<LayerCall>();
  call->layer = &layer;
  call->rope = rope;
  call->mask = mask;
  call->moe = bool(layer.moe);
  variable_list inputs{x};
  for (const auto& t : trainable_[index]) inputs.push_back(t);
  variable_list out = CheckpointedLayer::apply(call, at::TensorList(inputs));
  if (call->moe && router_logits) router_logits->push_back(out[1]);
  return out[0];
}

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
