#include "parallel/fsdp.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include "core/error.h"
#include "dist/comm.h"

namespace glint {

struct FsdpRunner::Unit {
  std::vector<at::Tensor> params;  // the layer's parameter tensors (storage swapped in/out)
  std::vector<std::vector<int64_t>> shapes;
  int64_t numel = 0;    // unpadded
  int64_t padded = 0;   // multiple of W
  bool gathered = false;
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FsdpCall : torch::CustomClassHolder {
  FsdpRunner* runner = nullptr;
  int64_t index = 0;
  DecoderLayerImpl* layer = nullptr;
  RotaryTables rope;
  at::Tensor mask;
  bool moe = false;
  bool has_shard = false;  // inputs[1] is the layer's trainable shard
};

at::Tensor empty_like_storage(const at::Tensor& p) { return at::empty({0}, p.options()); }

// inputs: {x, [shard], adapters...}; outputs: {y, [router logits]}.
struct FsdpLayer : torch::autograd::Function<FsdpLayer> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<FsdpCall> call,
                               at::TensorList inputs) {
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    ctx->save_for_backward({inputs[0]});
    ctx->saved_data["x_requires_grad"] = inputs[0].requires_grad();
    c10::List<at::Tensor> rest;
    for (size_t i = 1; i < inputs.size(); ++i) rest.push_back(inputs[i]);
    ctx->saved_data["rest"] = rest;
    call->runner->gather(call->index);
    std::vector<at::Tensor> logits;
    at::Tensor y = call->layer->forward(inputs[0], call->rope, call->mask, call->moe ? &logits : nullptr);
    call->runner->release(call->index);
    variable_list out{y};
    if (call->moe) out.push_back(logits.at(0));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto call = c10::static_intrusive_pointer_cast<FsdpCall>(ctx->saved_data["call"].toCapsule());
    at::Tensor saved_x = ctx->get_saved_variables()[0];
    c10::List<at::Tensor> rest = ctx->saved_data["rest"].toTensorList();
    FsdpRunner& runner = *call->runner;
    runner.gather(call->index);
    auto& params = runner.unit(call->index).params;
    if (call->has_shard)
      for (auto& p : params) p.requires_grad_(true);
    variable_list result(2 + rest.size());
    {
      at::AutoGradMode grad_on(true);
      at::Tensor x = saved_x.detach().requires_grad_(ctx->saved_data["x_requires_grad"].toBool());
      std::vector<at::Tensor> logits;
      at::Tensor y = call->layer->forward(x, call->rope, call->mask, call->moe ? &logits : nullptr);
      variable_list outs{y}, grads{grad_out[0]};
      if (call->moe && grad_out.size() > 1 && grad_out[1].defined()) {
        outs.push_back(logits.at(0));
        grads.push_back(grad_out[1]);
      }
      // Gradients w.r.t. x, the gathered parameters (full training) and the adapters.
      variable_list wrt;
      std::vector<int> slot;  // where each gradient goes: -1 x, -2 params, i adapter i
      if (x.requires_grad()) { wrt.push_back(x); slot.push_back(-1); }
      if (call->has_shard)
        for (auto& p : params) { wrt.push_back(p); slot.push_back(-2); }
      for (size_t i = call->has_shard ? 1 : 0; i < rest.size(); ++i) {
        at::Tensor t = rest[i];
        if (t.requires_grad()) { wrt.push_back(t); slot.push_back(int(i)); }
      }
      if (!wrt.empty()) {
        variable_list g = torch::autograd::grad(outs, wrt, grads, false, false, /*allow_unused=*/true);
        size_t pi = 0;
        for (size_t j = 0; j < g.size(); ++j) {
          if (slot[j] == -1) {
            result[1] = g[j];
          } else if (slot[j] == -2) {
            at::Tensor gj = g[j].defined() ? g[j] : at::zeros_like(params[pi]);
            params[pi++].mutable_grad() = gj;
          } else {
            result[2 + slot[j]] = g[j];
          }
        }
      }
    }
    if (call->has_shard) {
      result[2] = runner.reduce_scatter_grads(call->index);
      for (auto& p : params) {
        p.mutable_grad() = at::Tensor();
        p.requires_grad_(false);
      }
    }
    runner.release(call->index);
    return result;
  }
};

}  // namespace

FsdpRunner::FsdpRunner(CausalLMImpl& model, std::shared_ptr<Comm> comm, bool trainable_base,
                       std::vector<std::vector<at::Tensor>> adapters)
    : comm_(std::move(comm)), trainable_base_(trainable_base), adapters_(std::move(adapters)) {
  const int W = comm_->size(), r = comm_->rank();
  at::NoGradGuard no_grad;
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l) {
    auto u = std::make_shared<Unit>();
    std::vector<at::Tensor> flat;
    for (auto& p : model.layer(l)->parameters()) {
      u->params.push_back(p);
      u->shapes.push_back(p.sizes().vec());
      flat.push_back(p.detach().reshape({-1}));
      u->numel += p.numel();
      p.requires_grad_(false);
    }
    u->padded = (u->numel + W - 1) / W * W;
    at::Tensor full = at::cat(flat);
    if (u->padded > u->numel) full = at::cat({full, at::zeros({u->padded - u->numel}, full.options())});
    int64_t n = u->padded / W;
    shards_.push_back(full.narrow(0, r * n, n).clone().requires_grad_(trainable_base_));
    for (auto& p : u->params) p.set_(empty_like_storage(p));  // the full copy is gone
    units_.push_back(u);
  }
}

void FsdpRunner::gather(int64_t l) {
  Unit& u = *units_[l];
  if (u.gathered) return;
  at::NoGradGuard no_grad;
  at::Tensor full = comm_->all_gather(shards_[l].detach());  // [N_l]
  int64_t off = 0;
  for (size_t i = 0; i < u.params.size(); ++i) {
    int64_t n = c10::multiply_integers(u.shapes[i]);
    u.params[i].set_(full.storage(), full.storage_offset() + off, u.shapes[i],
                     c10::contiguous_strides(u.shapes[i]));
    off += n;
  }
  u.gathered = true;
}

void FsdpRunner::release(int64_t l) {
  Unit& u = *units_[l];
  if (!u.gathered) return;
  at::NoGradGuard no_grad;
  for (auto& p : u.params) p.set_(empty_like_storage(p));
  u.gathered = false;
}

at::Tensor FsdpRunner::reduce_scatter_grads(int64_t l) {
  Unit& u = *units_[l];
  std::vector<at::Tensor> g;
  for (auto& p : u.params) g.push_back(p.grad().reshape({-1}));
  at::Tensor flat = at::cat(g);
  if (u.padded > u.numel) flat = at::cat({flat, at::zeros({u.padded - u.numel}, flat.options())});
  return comm_->reduce_scatter_sum(flat);
}

at::Tensor FsdpRunner::run(int64_t index, DecoderLayerImpl& layer, const at::Tensor& x,
                           const RotaryTables& rope, const at::Tensor& mask,
                           std::vector<at::Tensor>* router_logits) {
  if (!at::GradMode::is_enabled()) {
    gather(index);
    at::Tensor y = layer.forward(x, rope, mask, router_logits);
    release(index);
    return y;
  }
  auto call = c10::make_intrusive<FsdpCall>();
  call->runner = this;
  call->index = index;
  call->layer = &layer;
  call->rope = rope;
  call->mask = mask;
  call->moe = bool(layer.moe);
  call->has_shard = trainable_base_;
  variable_list inputs{x};
  if (trainable_base_) inputs.push_back(shards_[index]);
  for (const auto& t : adapters_[index]) inputs.push_back(t);
  variable_list out = FsdpLayer::apply(call, at::TensorList(inputs));
  if (call->moe && router_logits) router_logits->push_back(out[1]);
  return out[0];
}

}  // namespace glint
