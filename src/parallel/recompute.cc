#include "parallel/recompute.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include "core/error.h"

namespace glint {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor cpu_rng_state() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// What backward needs to re-run the layer; kept in the autograd context.
struct LayerCall : torch::CustomClassHolder {
  RecomputeRunner* runner = nullptr;
  int64_t index = 0;
  DecoderLayerImpl* layer = nullptr;
  LayerContext ctx;
  bool moe = false;
  // The default generator's state before the forward: the recompute replays it, so a
  // stochastic layer (LoRA dropout) draws the same masks twice.
  at::Tensor rng_state;

  variable_list compute(const at::Tensor& x) const {
    std::vector<at::Tensor> logits;
    at::Tensor y = layer->forward(x, ctx, moe ? &logits : nullptr);
    variable_list out{y};
    if (moe) out.push_back(logits.at(0));
    return out;
  }
};

// inputs: {x [B,S,H], grad inputs...}; outputs: {y [B,S,H], router logits [T,E] (MoE)}.
struct RecomputedLayer : torch::autograd::Function<RecomputedLayer> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<LayerCall> call,
                               at::TensorList inputs) {
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    ctx->save_for_backward({inputs[0]});
    ctx->saved_data["x_requires_grad"] = inputs[0].requires_grad();
    c10::List<at::Tensor> rest;
    for (size_t i = 1; i < inputs.size(); ++i) rest.push_back(inputs[i]);
    ctx->saved_data["rest"] = rest;
    call->runner->before_compute(call->index, /*in_backward=*/false);
    call->rng_state = cpu_rng_state();
    variable_list out = call->compute(inputs[0]);
    call->runner->after_compute(call->index);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto call = c10::static_intrusive_pointer_cast<LayerCall>(ctx->saved_data["call"].toCapsule());
    c10::List<at::Tensor> rest = ctx->saved_data["rest"].toTensorList();
    RecomputeRunner& runner = *call->runner;
    const int64_t shards = runner.num_shards(call->index);
    // One gradient per argument of forward: none for `call`, then x, then `rest`.
    variable_list result(2 + rest.size());
    runner.before_compute(call->index, /*in_backward=*/true);
    std::vector<at::Tensor>* params = shards > 0 ? runner.shard_params(call->index) : nullptr;
    if (params)
      for (auto& p : *params) p.requires_grad_(true);
    {
      at::AutoGradMode grad_on(true);
      at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(
          ctx->saved_data["x_requires_grad"].toBool());
      at::Tensor current = cpu_rng_state();
      set_cpu_rng_state(call->rng_state);
      variable_list outs = call->compute(x), grads{grad_out[0]};
      set_cpu_rng_state(current);
      if (outs.size() > 1) {
        if (grad_out.size() > 1 && grad_out[1].defined()) grads.push_back(grad_out[1]);
        else outs.pop_back();
      }
      // Gradients w.r.t. x, the gathered parameters of a shard, and the other inputs.
      variable_list wrt;
      std::vector<int> slot;  // -1: x; -2: gathered parameter; i >= 0: rest[i]
      auto want = [&](const at::Tensor& t, int where) {
        wrt.push_back(t);
        slot.push_back(where);
      };
      if (x.requires_grad()) want(x, -1);
      if (params)
        for (auto& p : *params) want(p, -2);
      for (size_t i = size_t(shards); i < rest.size(); ++i) {
        at::Tensor t = rest[i];
        if (t.requires_grad()) want(t, int(i));
      }
      if (!wrt.empty()) {
        variable_list g = torch::autograd::grad(outs, wrt, grads, false, false, /*allow_unused=*/true);
        size_t pi = 0;
        for (size_t j = 0; j < g.size(); ++j) {
          if (slot[j] == -1) {
            result[1] = g[j];
          } else if (slot[j] == -2) {
            at::Tensor& p = (*params)[pi++];
            p.mutable_grad() = g[j].defined() ? g[j] : at::zeros_like(p);
          } else {
            result[2 + slot[j]] = g[j];
          }
        }
      }
    }
    if (params) {
      std::vector<at::Tensor> g = runner.reduce_shard_grads(call->index);
      GLINT_ASSERT(int64_t(g.size()) == shards);
      for (int64_t k = 0; k < shards; ++k) result[2 + k] = g[k];
      for (auto& p : *params) {
        p.mutable_grad() = at::Tensor();
        p.requires_grad_(false);
      }
    }
    runner.after_compute(call->index);
    return result;
  }
};

}  // namespace

at::Tensor RecomputeRunner::run(int64_t index, DecoderLayerImpl& layer, const at::Tensor& x,
                                const LayerContext& ctx, std::vector<at::Tensor>* router_logits) {
  if (!at::GradMode::is_enabled()) {  // inference: nothing to recompute
    before_compute(index, /*in_backward=*/false);
    at::Tensor y = layer.forward(x, ctx, router_logits);
    after_compute(index);
    return y;
  }
  auto call = c10::make_intrusive<LayerCall>();
  call->runner = this;
  call->index = index;
  call->layer = &layer;
  call->ctx = ctx;
  call->moe = bool(layer.moe);
  variable_list inputs{x};
  for (const auto& t : grad_inputs(index)) inputs.push_back(t);
  variable_list out = RecomputedLayer::apply(call, at::TensorList(inputs));
  if (call->moe && router_logits) router_logits->push_back(out[1]);
  return out[0];
}

}  // namespace glint
