#include "parallel/fsdp.h"

#include <ATen/ATen.h>

#include "core/error.h"
#include "dist/comm.h"
#include "io/checkpoint.h"
#include "model/weights.h"

namespace glint {

struct FsdpRunner::Unit {
  std::vector<at::Tensor> params;  // the layer's parameter tensors (storage swapped in/out)
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::string> names;  // the parameters' model names
  int64_t numel = 0;    // unpadded
  int64_t padded = 0;   // multiple of W
  bool gathered = false;
};

namespace {
at::Tensor empty_like_storage(const at::Tensor& p) { return at::empty({0}, p.options()); }
}  // namespace

FsdpRunner::FsdpRunner(CausalLMImpl& model, std::shared_ptr<Comm> comm, bool trainable_base,
                       std::vector<std::vector<at::Tensor>> adapters, const CheckpointReader* ckpt)
    : comm_(std::move(comm)), trainable_base_(trainable_base), adapters_(std::move(adapters)) {
  const int W = comm_->size(), r = comm_->rank();
  at::NoGradGuard no_grad;
  // Units: one per decoder layer, then the root (embeddings, final norm, lm_head).
  const int64_t L = model.config.num_hidden_layers;
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> groups(L + 1);
  for (auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    int64_t unit = L;
    if (name.rfind("model.layers.", 0) == 0) unit = std::stoll(name.substr(13, name.find('.', 13) - 13));
    groups[unit].emplace_back(name, item.value());
  }
  for (int64_t l = 0; l <= L; ++l) {
    auto u = std::make_shared<Unit>();
    std::vector<std::string> names;
    for (auto& [name, p] : groups[l]) {
      u->params.push_back(p);
      u->shapes.push_back(p.sizes().vec());
      names.push_back(name);
      u->names.push_back(name);
      u->numel += p.numel();
      p.requires_grad_(false);
    }
    u->padded = (u->numel + W - 1) / W * W;
    const int64_t n = u->padded / W, lo = r * n, hi = lo + n;
    const auto options = u->params.front().options();
    at::Tensor shard;
    if (ckpt) {
      // Only the bytes of [lo, hi) of the unit's flat buffer are read.
      shard = at::zeros({n}, options);
      int64_t off = 0;
      for (size_t i = 0; i < u->params.size(); ++i) {
        int64_t numel = u->params[i].numel(), a = std::max(lo, off), b = std::min(hi, off + numel);
        if (a < b)
          shard.narrow(0, a - lo, b - a)
              .copy_(read_parameter_range(*ckpt, names[i], u->shapes[i], a - off, b - a,
                                          options.dtype().toScalarType()));
        off += numel;
      }
    } else {
      std::vector<at::Tensor> flat;
      for (auto& p : u->params) flat.push_back(p.detach().reshape({-1}));
      at::Tensor full = at::cat(flat);
      if (u->padded > u->numel) full = at::cat({full, at::zeros({u->padded - u->numel}, options)});
      shard = full.narrow(0, lo, n).clone();
    }
    shards_.push_back(shard.requires_grad_(trainable_base_));
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
  for (auto& p : u.params)
    g.push_back(p.grad().defined() ? p.grad().reshape({-1}) : at::zeros({p.numel()}, p.options()));
  at::Tensor flat = at::cat(g);
  if (u.padded > u.numel) flat = at::cat({flat, at::zeros({u.padded - u.numel}, flat.options())});
  return comm_->reduce_scatter_sum(flat);
}

std::vector<std::pair<std::string, at::Tensor>> FsdpRunner::gather_named(
    const std::vector<at::Tensor>& per_unit) {
  GLINT_ASSERT(per_unit.size() == units_.size());
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t k = 0; k < units_.size(); ++k) {
    const Unit& u = *units_[k];
    at::Tensor full = comm_->all_gather(per_unit[k].detach().contiguous());  // [N_u padded]
    int64_t off = 0;
    for (size_t i = 0; i < u.params.size(); ++i) {
      int64_t n = c10::multiply_integers(u.shapes[i]);
      out.emplace_back(u.names[i], full.narrow(0, off, n).view(u.shapes[i]));
      off += n;
    }
  }
  return out;
}

void FsdpRunner::begin_root() {
  gather(root_unit());
  if (trainable_base_)
    for (auto& p : units_[root_unit()]->params) p.requires_grad_(true);
}

void FsdpRunner::end_root() {
  int64_t root = root_unit();
  if (trainable_base_) {
    at::Tensor g = reduce_scatter_grads(root);
    at::Tensor& shard = shards_[root];
    if (shard.grad().defined()) shard.mutable_grad().add_(g);
    else shard.mutable_grad() = g;
    for (auto& p : units_[root]->params) {
      p.mutable_grad() = at::Tensor();
      p.requires_grad_(false);
    }
  }
  release(root);
}

std::vector<at::Tensor> FsdpRunner::grad_inputs(int64_t index) {
  std::vector<at::Tensor> out;
  if (trainable_base_) out.push_back(shards_[index]);
  for (const auto& t : adapters_[index]) out.push_back(t);
  return out;
}

std::vector<at::Tensor>* FsdpRunner::shard_params(int64_t index) {
  return trainable_base_ ? &units_[index]->params : nullptr;
}

}  // namespace glint
