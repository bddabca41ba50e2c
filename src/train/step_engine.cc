#include "train/step_engine.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/op_profile.h"
#include "data/sampler.h"
#include "dist/comm.h"
#include "lora/tenants.h"
#include "model/causal_lm.h"
#include "parallel/fsdp.h"

namespace glint {

Learner::Learner() = default;
Learner::~Learner() = default;

StepEngine::StepEngine(CausalLMImpl& model, StepParallel parallel, TenantBank* bank)
    : model_(model), parallel_(std::move(parallel)), bank_(bank) {
  if (!parallel_.expert_replicas) parallel_.expert_replicas = parallel_.world;
}

StepEngine::~StepEngine() = default;

Placement StepEngine::placement(bool expert) const {
  Comm* group = expert ? parallel_.expert_replicas.get() : parallel_.world.get();
  return Placement{group, group->size()};
}

Learner& StepEngine::add(std::string name, int64_t slot, const std::vector<std::pair<std::string, at::Tensor>>& named,
                         const std::vector<bool>& expert, const AdamWOptions* adam) {
  GLINT_ASSERT(expert.size() == named.size(), "one expert flag per tensor");
  auto l = std::make_unique<Learner>();
  l->name = std::move(name);
  l->slot = slot;
  for (size_t i = 0; i < named.size(); ++i) {
    at::Tensor t = named[i].second;
    if (!adam) t.set_requires_grad(false);
    l->params.push_back(t);
    l->names.push_back(named[i].first);
    l->expert.push_back(expert[i]);
    l->placement.push_back(placement(expert[i]));
  }
  if (adam) l->optimizer = std::make_unique<AdamW>(l->params, *adam);
  learners_.push_back(std::move(l));
  return *learners_.back();
}

Learner& StepEngine::add_shards(std::vector<at::Tensor> shards, const AdamWOptions& adam) {
  auto l = std::make_unique<Learner>();
  l->params = std::move(shards);
  l->names.assign(l->params.size(), "");
  l->expert.assign(l->params.size(), false);
  l->placement.assign(l->params.size(), Placement{});  // each a unique shard, reduced by FSDP
  l->optimizer = std::make_unique<AdamW>(l->params, adam);
  learners_.push_back(std::move(l));
  return *learners_.back();
}

void StepEngine::remove(const std::string& name) {
  auto it = std::find_if(learners_.begin(), learners_.end(), [&](const auto& l) { return l->name == name; });
  GLINT_CHECK(it != learners_.end(), "no tenant '", name, "'");
  learners_.erase(it);
}

Learner* StepEngine::find(const std::string& name) {
  for (auto& l : learners_)
    if (l->name == name) return l.get();
  return nullptr;
}

std::vector<at::Tensor> StepEngine::all_params() const {
  std::vector<at::Tensor> all;
  for (const auto& l : learners_) all.insert(all.end(), l->params.begin(), l->params.end());
  return all;
}

StepEngine::Counts StepEngine::count_tokens(const std::vector<Batch>& micro_batches, int64_t slots) {
  at::Tensor counts = at::zeros({slots + 2}, at::kDouble);  // [slot..., tokens, micro-batches]
  for (const auto& b : micro_batches) {
    if (b.row_tags.defined()) {
      at::Tensor per_row = b.labels.narrow(1, 1, b.labels.size(1) - 1).ne(kIgnoreIndex).sum(1);  // [B]
      counts.narrow(0, 0, slots).index_add_(0, b.row_tags.to(at::kCPU), per_row.to(at::kCPU, at::kDouble));
    } else {
      counts[0] += double(b.label_tokens);
    }
    counts[slots] += b.segment_ids.ge(0).sum().item<double>();
  }
  counts[slots + 1] = double(micro_batches.size());
  parallel_.world->all_reduce_sum(counts);
  Counts c;
  for (int64_t s = 0; s < slots; ++s) c.label_tokens.push_back(counts[s].item<double>());
  c.tokens = int64_t(counts[slots].item<double>());
  c.micro_batches = counts[slots + 1].item<double>();
  return c;
}

StepEngine::Objective StepEngine::training_objective(const std::vector<double>& label_tokens, double aux_coef,
                                                     double total_micro_batches) {
  return [label_tokens, aux_coef, total_micro_batches](size_t, const Batch& b, const LossParts& parts) {
    at::Tensor objective;
    if (!b.row_tags.defined()) {
      objective = parts.ce_sum / label_tokens.at(0);
    } else {
      // Each row's loss over its slot's label tokens of the whole step.
      at::Tensor row_ce = parts.token_ce.sum(1);  // [B]
      at::Tensor denom = at::tensor(label_tokens, at::kDouble)
                             .index_select(0, b.row_tags.to(at::kCPU))
                             .clamp_min(1.0)
                             .to(row_ce.device(), row_ce.scalar_type());
      objective = (row_ce / denom).sum();
    }
    if (parts.aux_loss.defined()) objective = objective + parts.aux_loss * (aux_coef / total_micro_batches);
    return objective;
  };
}

MicroBatchPass StepEngine::forward_backward(const std::vector<Batch>& micro_batches, int64_t slots,
                                            const Objective& objective, bool backward, bool router_stats) {
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  MicroBatchPass pass;
  pass.ce = at::zeros({slots}, at::kDouble);
  // FSDP: the root unit (embeddings, final norm, lm_head) is gathered for the pass; with
  // a backward, its gradients are reduce-scattered at the end.
  FsdpRunner* fsdp = parallel_.fsdp.get();
  if (fsdp) backward ? fsdp->begin_root() : fsdp->gather(fsdp->root_unit());
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const Batch& b = micro_batches[i];
    auto tf = clock::now();
    if (bank_) bank_->set_rows(b.row_tags);
    at::Tensor obj;
    {
      profile::Phase phase("forward");
      std::optional<at::NoGradGuard> no_grad;
      if (!backward) no_grad.emplace();
      LossParts parts = causal_lm_loss(model_, b.input_ids, b.labels, b.position_ids, b.segment_ids, router_stats);
      obj = objective(i, b, parts);
      // The statistics in float64 whatever the compute dtype.
      at::Tensor row_ce = parts.token_ce.detach().to(at::kCPU, at::kDouble).sum(1);  // [B]
      if (b.row_tags.defined()) pass.ce.index_add_(0, b.row_tags.to(at::kCPU), row_ce);
      else pass.ce[0] += row_ce.sum().item<double>();
      if (parts.aux_loss.defined()) {
        pass.aux_loss += parts.aux_loss.item<double>();
        pass.has_aux = true;
      }
      if (parts.expert_tokens.defined())
        pass.expert_tokens =
            pass.expert_tokens.defined() ? pass.expert_tokens + parts.expert_tokens : parts.expert_tokens;
    }
    auto tb = clock::now();
    pass.forward_seconds += std::chrono::duration<double>(tb - tf).count();
    if (backward && obj.defined() && obj.requires_grad()) {
      profile::Phase phase("backward");
      obj.backward();
    }
    pass.backward_seconds += seconds_since(tb);
  }
  if (fsdp) backward ? fsdp->end_root() : fsdp->release(fsdp->root_unit());
  return pass;
}

void StepEngine::reduce(const std::vector<Learner*>& learners) {
  // One flat buffer per (replica group, dtype): one collective per group per step. The
  // buckets go in the order of their first tensor, the same on every rank (never in the
  // order of the groups' addresses, which differ between processes: ranks would then
  // enter different collectives and wait on each other forever).
  profile::Phase phase("reduce");
  std::vector<std::pair<std::pair<Comm*, at::ScalarType>, std::vector<at::Tensor*>>> buckets;
  for (Learner* l : learners) {
    for (size_t i = 0; i < l->params.size(); ++i) {
      at::Tensor& p = l->params[i];
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      Comm* group = l->placement[i].replicas;
      if (!group || group->size() <= 1) continue;  // shards are reduced
      std::pair<Comm*, at::ScalarType> key{group, p.scalar_type()};
      auto it = std::find_if(buckets.begin(), buckets.end(), [&](const auto& b) { return b.first == key; });
      if (it == buckets.end()) it = buckets.insert(buckets.end(), {key, {}});
      it->second.push_back(&p);
    }
  }
  for (auto& [key, params] : buckets) {
    std::vector<at::Tensor> flat;
    for (at::Tensor* p : params) flat.push_back(p->grad().reshape({-1}));
    at::Tensor buf = at::cat(flat);
    key.first->all_reduce_sum(buf);
    int64_t off = 0;
    for (at::Tensor* p : params) {
      int64_t n = p->numel();
      p->grad().copy_(buf.narrow(0, off, n).view(p->sizes()));
      off += n;
    }
  }
}

namespace {

// The sum of g's squares in float64, a block of elements at a time: a float64 copy of the
// whole gradient and its square took four times the largest gradient (a layer's packed
// experts) on top of all the gradients.
double squared_sum(const at::Tensor& g) {
  constexpr int64_t kBlock = int64_t(1) << 20;
  const at::Tensor flat = g.contiguous().view(-1);
  at::Tensor sum = at::zeros({}, flat.options().dtype(at::kDouble));  // on g's device: one sync
  for (int64_t off = 0; off < flat.numel(); off += kBlock) {
    const at::Tensor block = flat.narrow(0, off, std::min(kBlock, flat.numel() - off)).to(at::kDouble);
    sum.add_(at::dot(block, block));
  }
  return sum.item<double>();
}

}  // namespace

double StepEngine::clip(Learner& learner, double max_norm) {
  // One rule for every placement: sum of squares over the tensors this rank holds, each
  // divided by how many ranks hold an identical copy, summed over the world.
  profile::Phase phase("clip");
  at::NoGradGuard no_grad;
  double local = 0;
  for (size_t i = 0; i < learner.params.size(); ++i) {
    const at::Tensor& g = learner.params[i].grad();
    if (!g.defined()) continue;
    local += squared_sum(g) / learner.placement[i].copies;
  }
  at::Tensor total = at::tensor({local}, at::kDouble);
  parallel_.world->all_reduce_sum(total);
  double norm = std::sqrt(total.item<double>());
  if (max_norm > 0 && norm > max_norm) {
    double coef = max_norm / (norm + 1e-6);
    for (const auto& p : learner.params)
      if (p.grad().defined()) p.grad().mul_(coef);
  }
  return norm;
}

void StepEngine::update(Learner& learner, double lr) {
  GLINT_ASSERT(learner.optimizer, "an update of a learner without an optimizer");
  profile::Phase phase("optimizer");
  learner.optimizer->step(lr);
  ++learner.step;
}

void StepEngine::zero_grad(Learner& learner) {
  for (auto& p : learner.params) p.mutable_grad() = at::Tensor();
}

at::Tensor StepEngine::all_experts(const at::Tensor& local) {
  return parallel_.ep ? parallel_.ep->all_gather(local.contiguous()) : local;
}

}  // namespace glint
