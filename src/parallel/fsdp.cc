#include "parallel/fsdp.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "core/error.h"
#include "dist/comm.h"
#include "io/model_files.h"
#include "model/weights.h"

namespace glint {

// A flat buffer of parameters sharded over one group.
struct FsdpRunner::Part {
  std::shared_ptr<Comm> comm;
  std::vector<at::Tensor> params;  // parameter tensors (storage swapped in/out)
  std::vector<std::vector<int64_t>> shapes;
  std::vector<ParameterSite> sites;  // the parameters' names and places
  int64_t numel = 0;               // unpadded
  int64_t padded = 0;              // multiple of the group size
  size_t shard = 0;                // index into shards_
};

struct FsdpRunner::Unit {
  std::vector<Part> parts;
  std::vector<at::Tensor> all_params;  // every part's params, in order
  bool gathered = false;
};

// Collectives started for one unit, one per part (null where the part's group is one rank).
struct FsdpRunner::InFlight {
  int64_t unit = -1;
  std::vector<std::unique_ptr<PendingCollective>> parts;
};

namespace {
at::Tensor empty_like_storage(const at::Tensor& p) { return at::empty({0}, p.options()); }

// Where a parameter of shape `shape` lies in the checkpoint's full tensor: the full shape
// and the flat offset of its first element (experts may be an EP slice).
std::pair<std::vector<int64_t>, int64_t> checkpoint_extent(CausalLMImpl& model, const ParameterSite& site,
                                                           const std::vector<int64_t>& shape) {
  if (!site.expert) return {shape, 0};
  int64_t first = model.layer(site.layer)->moe->experts->first_expert;
  std::vector<int64_t> full = shape;
  full[0] = model.config.num_experts;
  return {full, first * (c10::multiply_integers(shape) / shape[0])};
}
}  // namespace

FsdpRunner::FsdpRunner(CausalLMImpl& model, std::shared_ptr<Comm> comm, bool trainable_base,
                       std::vector<std::vector<at::Tensor>> adapters, const CheckpointReader* ckpt,
                       std::shared_ptr<Comm> expert_comm, bool overlap)
    : trainable_base_(trainable_base), overlap_(overlap), adapters_(std::move(adapters)) {
  at::NoGradGuard no_grad;
  // Units: one per decoder layer, then the root (embeddings, final norm, lm_head); in a
  // layer, part 0 holds the non-expert parameters, part 1 the experts (with expert_comm).
  const int64_t L = model.config.num_hidden_layers;
  units_.resize(L + 1);
  for (auto& u : units_) {
    u = std::make_shared<Unit>();
    u->parts.resize(expert_comm ? 2 : 1);
    u->parts[0].comm = comm;
    if (expert_comm) u->parts[1].comm = expert_comm;
  }
  for (auto& site : parameter_sites(model)) {
    Part& part = units_[site.layer < 0 ? L : site.layer]->parts[expert_comm && site.expert ? 1 : 0];
    part.params.push_back(site.tensor);
    part.shapes.push_back(site.tensor.sizes().vec());
    part.sites.push_back(site);
    part.numel += site.tensor.numel();
    site.tensor.requires_grad_(false);
  }
  for (auto& u : units_) {
    // Drop empty parts (a dense layer has no experts).
    std::vector<Part> kept;
    for (auto& part : u->parts)
      if (!part.params.empty()) kept.push_back(std::move(part));
    u->parts = std::move(kept);
    for (auto& part : u->parts) {
      const int W = part.comm->size(), r = part.comm->rank();
      part.padded = (part.numel + W - 1) / W * W;
      const int64_t n = part.padded / W, lo = r * n, hi = lo + n;
      const auto options = part.params.front().options();
      at::Tensor shard;
      if (ckpt) {
        // Only the bytes of [lo, hi) of the part's flat buffer are read.
        shard = at::zeros({n}, options);
        int64_t off = 0;
        for (size_t i = 0; i < part.params.size(); ++i) {
          int64_t numel = part.params[i].numel(), a = std::max(lo, off), b = std::min(hi, off + numel);
          if (a < b) {
            auto [full_shape, base] = checkpoint_extent(model, part.sites[i], part.shapes[i]);
            shard.narrow(0, a - lo, b - a)
                .copy_(read_parameter_range(*ckpt, part.sites[i], full_shape, base + a - off, b - a,
                                            options.dtype().toScalarType()));
          }
          off += numel;
        }
      } else {
        std::vector<at::Tensor> flat;
        for (auto& p : part.params) flat.push_back(p.detach().reshape({-1}));
        at::Tensor full = at::cat(flat);
        if (part.padded > part.numel) full = at::cat({full, at::zeros({part.padded - part.numel}, options)});
        shard = full.narrow(0, lo, n).clone();
      }
      std::vector<ShardSpan> spans;
      for (size_t i = 0, off = 0; i < part.params.size(); off += part.params[i].numel(), ++i) {
        const int64_t numel = part.params[i].numel(), a = std::max(lo, int64_t(off)), b = std::min(hi, int64_t(off) + numel);
        if (a >= b) continue;
        auto [full_shape, base] = checkpoint_extent(model, part.sites[i], part.shapes[i]);
        spans.push_back({part.sites[i].name, full_shape, base + a - int64_t(off), a - lo, b - a});
      }
      spans_.push_back(std::move(spans));
      part.shard = shards_.size();
      shards_.push_back(shard.requires_grad_(trainable_base_));
      for (auto& p : part.params) {
        p.set_(empty_like_storage(p));  // the full copy is gone
        u->all_params.push_back(p);
      }
    }
  }
}

FsdpRunner::~FsdpRunner() = default;

void FsdpRunner::prefetch(int64_t u) {
  auto next = std::make_unique<InFlight>();
  next->unit = u;
  for (auto& part : units_[u]->parts)
    next->parts.push_back(part.comm->size() == 1 ? nullptr
                                                  : part.comm->start_all_gather(shards_[part.shard].detach()));
  prefetched_ = std::move(next);  // one not taken (a schedule that changed) is waited for and dropped
}

void FsdpRunner::gather(int64_t u) {
  Unit& unit = *units_[u];
  if (unit.gathered) return;
  at::NoGradGuard no_grad;
  if (prefetched_ && prefetched_->unit == u) ++prefetched_gathers_;
  else prefetch(u);
  std::unique_ptr<InFlight> started = std::move(prefetched_);
  for (size_t k = 0; k < unit.parts.size(); ++k) {
    Part& part = unit.parts[k];
    // A group of one holds the whole buffer: the parameters view the shard itself.
    at::Tensor full = started->parts[k] ? started->parts[k]->wait() : shards_[part.shard].detach();
    int64_t off = 0;
    for (size_t i = 0; i < part.params.size(); ++i) {
      int64_t n = c10::multiply_integers(part.shapes[i]);
      part.params[i].set_(full.storage(), full.storage_offset() + off, part.shapes[i],
                          c10::contiguous_strides(part.shapes[i]));
      off += n;
    }
  }
  unit.gathered = true;
}

void FsdpRunner::before_compute(int64_t index, bool in_backward) {
  gather(index);
  const int64_t next = in_backward ? index - 1 : index + 1;
  if (overlap_ && next >= 0 && next < root_unit() && !units_[next]->gathered) {
    at::NoGradGuard no_grad;
    prefetch(next);
  }
}

void FsdpRunner::with_layer_shapes(const std::function<void()>& fn) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> shaped;
  for (auto& unit : units_) {
    if (unit->gathered) continue;
    for (auto& part : unit->parts)
      for (size_t i = 0; i < part.params.size(); ++i) {
        at::Tensor one = at::zeros({1}, part.params[i].options());
        part.params[i].set_(one.storage(), 0, part.shapes[i], std::vector<int64_t>(part.shapes[i].size(), 0));
        shaped.push_back(part.params[i]);
      }
  }
  auto restore = [&] {
    for (auto& p : shaped) p.set_(empty_like_storage(p));
  };
  try {
    fn();
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

void FsdpRunner::release(int64_t u) {
  Unit& unit = *units_[u];
  if (!unit.gathered) return;
  at::NoGradGuard no_grad;
  for (auto& p : unit.all_params) p.set_(empty_like_storage(p));
  unit.gathered = false;
}

namespace {
// Unit u's gradient of one part as a flat buffer of the part's padded length.
at::Tensor flat_gradient(const std::vector<at::Tensor>& params, int64_t padded) {
  std::vector<at::Tensor> g;
  int64_t n = 0;
  for (auto& p : params) {
    g.push_back(p.grad().defined() ? p.grad().reshape({-1}) : at::zeros({p.numel()}, p.options()));
    n += p.numel();
  }
  if (padded > n) g.push_back(at::zeros({padded - n}, g.front().options()));
  return at::cat(g);
}
}  // namespace

std::vector<at::Tensor> FsdpRunner::reduce_scatter_grads(int64_t u) {
  std::vector<at::Tensor> out;
  for (auto& part : units_[u]->parts) {
    at::Tensor flat = flat_gradient(part.params, part.padded);
    out.push_back(part.comm->size() == 1 ? flat : part.comm->reduce_scatter_sum(flat));
  }
  return out;
}

std::vector<at::Tensor> FsdpRunner::reduce_shard_grads(int64_t u) {
  auto started = std::make_unique<InFlight>();
  started->unit = u;
  for (auto& part : units_[u]->parts) {
    at::Tensor flat = flat_gradient(part.params, part.padded);
    started->parts.push_back(part.comm->size() == 1 ? std::make_unique<ReadyCollective>(flat)
                                                     : part.comm->start_reduce_scatter_sum(flat));
  }
  reducing_.push_back(std::move(started));
  // Two in flight at most: the older ones are done by now, or the wait bounds memory.
  settle_gradients(overlap_ ? 2 : 0);
  return std::vector<at::Tensor>(units_[u]->parts.size());
}

void FsdpRunner::settle_gradients(size_t keep) {
  at::NoGradGuard no_grad;
  while (reducing_.size() > keep) {
    std::unique_ptr<InFlight> oldest = std::move(reducing_.front());
    reducing_.pop_front();
    const auto& parts = units_[oldest->unit]->parts;
    for (size_t k = 0; k < parts.size(); ++k) accumulate(parts[k].shard, oldest->parts[k]->wait());
  }
}

void FsdpRunner::accumulate(size_t shard, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  at::Tensor& s = shards_[shard];
  if (s.grad().defined()) s.mutable_grad().add_(grad);
  else s.mutable_grad() = grad;
}

std::vector<std::pair<std::string, at::Tensor>> FsdpRunner::gather_named(
    const std::vector<at::Tensor>& per_shard) {
  GLINT_ASSERT(per_shard.size() == shards_.size());
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& u : units_)
    for (const auto& part : u->parts) {
      at::Tensor full = part.comm->all_gather(per_shard[part.shard].detach().contiguous());  // [N padded]
      int64_t off = 0;
      for (size_t i = 0; i < part.params.size(); ++i) {
        int64_t n = c10::multiply_integers(part.shapes[i]);
        out.emplace_back(part.sites[i].name, full.narrow(0, off, n).view(part.shapes[i]));
        off += n;
      }
    }
  return out;
}

void FsdpRunner::begin_root() {
  gather(root_unit());
  if (trainable_base_)
    for (auto& p : units_[root_unit()]->all_params) p.requires_grad_(true);
}

void FsdpRunner::end_root() {
  int64_t root = root_unit();
  if (trainable_base_) {
    settle_gradients();
    std::vector<at::Tensor> g = reduce_scatter_grads(root);
    const auto& parts = units_[root]->parts;
    for (size_t k = 0; k < parts.size(); ++k) accumulate(parts[k].shard, g[k]);
    for (auto& p : units_[root]->all_params) {
      p.mutable_grad() = at::Tensor();
      p.requires_grad_(false);
    }
  }
  release(root);
}

int64_t FsdpRunner::num_shards(int64_t index) const {
  return trainable_base_ ? int64_t(units_[index]->parts.size()) : 0;
}

std::vector<at::Tensor> FsdpRunner::grad_inputs(int64_t index) {
  std::vector<at::Tensor> out;
  if (trainable_base_)
    for (const auto& part : units_[index]->parts) out.push_back(shards_[part.shard]);
  for (const auto& t : adapters_[index]) out.push_back(t);
  return out;
}

std::vector<at::Tensor>* FsdpRunner::shard_params(int64_t index) {
  return trainable_base_ ? &units_[index]->all_params : nullptr;
}

}  // namespace glint
