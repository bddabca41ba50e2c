// Multi-tenant LoRA training: the tenants' sequences share micro-batches; each tenant's
// loss is normalised by its own label tokens, its gradient clipped by its own norm and
// applied by its own AdamW on its own schedule, so a tenant trains exactly as it would
// alone on the same samples. A tenant with no sequence in a step is not touched.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "core/fs.h"
#include "data/collate.h"
#include "data/sampler.h"
#include "dist/comm.h"
#include "io/safetensors.h"
#include "parallel/expert_parallel.h"
#include "parallel/fsdp.h"
#include "train/trainer.h"

namespace glint {

TenantSpec TenantSpec::parse(const std::string& text, const TrainOptions& d) {
  TenantSpec t;
  t.adapter.lora = d.lora;
  t.seed = d.seed;
  t.warmup_steps = d.warmup_steps;
  t.adam = d.adam;
  t.adam.weight_decay = d.weight_decay;
  bool has_r = false, has_alpha = false;
  std::stringstream in(text);
  std::string item;
  auto number = [&](const std::string& key, const std::string& v) {
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    GLINT_CHECK(!v.empty() && end && *end == '\0', "--tenant ", text, ": ", key, "=", v, " is not a number");
    return x;
  };
  while (std::getline(in, item, ',')) {
    size_t eq = item.find('=');
    GLINT_CHECK(eq != std::string::npos, "--tenant ", text, ": '", item, "' is not key=value");
    std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "name") t.adapter.name = v;
    else if (k == "data") t.data = v;
    else if (k == "eval") t.eval_data = v;
    else if (k == "r") t.adapter.lora.r = int64_t(number(k, v)), has_r = true;
    else if (k == "alpha") t.adapter.lora.alpha = number(k, v), has_alpha = true;
    else if (k == "rslora") t.adapter.lora.use_rslora = v == "1" || v == "true";
    else if (k == "targets") {
      std::string list = v;
      for (char& c : list)
        if (c == '+') c = ',';
      LoraOptions::parse_targets(list, "--tenant " + text + " targets", &t.adapter.lora);
    } else if (k == "lr") t.lr = number(k, v);
    else if (k == "steps") t.steps = int64_t(number(k, v));
    else if (k == "batch") t.batch_size = int64_t(number(k, v));
    else if (k == "warmup") t.warmup_steps = int64_t(number(k, v));
    else if (k == "seed") t.seed = uint64_t(number(k, v));
    else if (k == "wd") t.adam.weight_decay = number(k, v);
    else if (k == "beta1") t.adam.beta1 = number(k, v);
    else if (k == "beta2") t.adam.beta2 = number(k, v);
    else if (k == "eps") t.adam.eps = number(k, v);
    else fail("--tenant ", text, ": unknown key '", k,
              "' (name, data, eval, r, alpha, rslora, targets, lr, steps, batch, warmup, seed, wd, beta1, beta2, eps)");
  }
  if (has_r && !has_alpha) t.adapter.lora.alpha = 2.0 * double(t.adapter.lora.r);  // the CLI's default ratio
  GLINT_CHECK(!t.adapter.name.empty(), "--tenant ", text, ": name= is required");
  GLINT_CHECK(!t.data.empty(), "--tenant ", text, ": data= is required");
  GLINT_CHECK(t.steps >= 0 && t.batch_size >= 0 && t.lr >= 0, "--tenant ", text, ": steps, batch and lr must be >= 0");
  if (t.steps == 0) t.steps = d.steps;
  if (t.batch_size == 0) t.batch_size = d.batch_size;
  if (t.lr == 0) t.lr = d.lr;
  t.adam.validate("--tenant " + text);
  t.adapter.seed = t.seed + 2;  // as apply_lora's seed in a single-adapter run
  return t;
}

void Trainer::setup_tenants(std::vector<std::vector<Sample>> data, std::vector<std::vector<Sample>> eval) {
  const int W = comm_->size();
  int64_t r_max = 0;
  for (const auto& t : opt_.tenants) r_max = std::max(r_max, t.adapter.lora.r);
  bank_ = std::make_unique<TenantBank>(*model_, int64_t(opt_.tenants.size()), r_max);
  int64_t steps = 0;
  for (size_t i = 0; i < opt_.tenants.size(); ++i) {
    if (opt_.tenants[i].steps == 0) opt_.tenants[i].steps = steps_for_epochs(data[i].size(), opt_.tenants[i].batch_size);
    const TenantSpec& spec = opt_.tenants[i];
    GLINT_CHECK(spec.batch_size % W == 0, "tenant ", spec.adapter.name, ": batch (", spec.batch_size,
                ") must be a multiple of the number of ranks (", W, ")");
    auto st = std::make_unique<TenantState>();
    st->spec = spec;
    TenantOptions adapter = spec.adapter;
    st->slot = bank_->add(adapter);
    st->samples = std::move(data[i]);
    st->eval_samples = std::move(eval[i]);
    report_.push_back(epoch_line("tenant " + spec.adapter.name, st->samples, spec.steps, spec.batch_size));
    st->sampler = std::make_unique<EpochSampler>(st->samples.size(), spec.seed);
    std::vector<bool> expert = bank_->adapter(st->slot).expert_parameters();
    size_t k = 0;
    for (auto& [name, t] : bank_->adapter(st->slot).named_parameters()) {
      if (expert[k]) expert_tensor_names_.insert(name);
      Comm* group = expert[k++] ? expert_replicas_.get() : comm_.get();
      st->params.push_back(t);
      st->names.push_back(name);
      st->placement.push_back(Placement{group, group->size()});
      trainable_.push_back(t);
      trainable_names_.push_back(spec.adapter.name + "/" + name);
      placement_.push_back(st->placement.back());
    }
    st->optimizer = std::make_unique<AdamW>(st->params, spec.adam);
    st->schedule.peak_lr = spec.lr;
    st->schedule.total_steps = spec.steps;
    st->schedule.warmup_steps = spec.warmup_steps >= 0 ? spec.warmup_steps : spec.steps / 20;
    st->schedule.min_lr_ratio = opt_.min_lr_ratio;
    steps = std::max(steps, spec.steps);
    tenants_.push_back(std::move(st));
  }
  opt_.steps = steps;  // the run lasts until the last tenant is done
  // lora_ stays empty; the layers' grad inputs (recompute, FSDP) are every tenant's tensors.
  lora_.sites.clear();
  for (auto& st : tenants_)
    for (const LoraSite& site : bank_->adapter(st->slot).sites) lora_.sites.push_back(site);
}

int64_t Trainer::tenant_weight_bytes() const {
  int64_t n = 0;
  for (const auto& st : tenants_) n += st->optimizer->state_bytes();
  return n;
}

std::vector<Batch> Trainer::next_tenant_batches() {
  // Each tenant still training contributes its batch; every rank keeps its contiguous
  // share of each tenant's batch. Rows stay one tenant each (packing is per tenant).
  const int W = comm_->size(), r = comm_->rank();
  std::vector<Batch> parts;
  for (auto& st : tenants_) {
    if (st->step >= st->spec.steps) continue;
    std::vector<size_t> idx = st->sampler->next(st->spec.batch_size);
    const int64_t share = st->spec.batch_size / W;
    std::vector<const Sample*> picked;
    for (int64_t i = r * share; i < (r + 1) * share; ++i) picked.push_back(&st->samples[idx[i]]);
    // All of the tenant's share in one batch (packed per tenant with --pack).
    std::vector<Batch> one = collate(picked, data_->collate, int64_t(picked.size()));
    GLINT_ASSERT(one.size() == 1);
    one[0].row_tags = at::full({one[0].input_ids.size(0)}, st->slot, at::kLong);
    parts.push_back(std::move(one[0]));
  }
  GLINT_ASSERT(!parts.empty(), "no tenant has steps left");
  Batch all = concat_rows(parts, data_->collate.pad_id);
  return split_rows(all, micro_batch_size_);
}

StepStats Trainer::step_tenants(const std::vector<Batch>& micro_batches) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  const int64_t S = bank_->num_slots();
  StepStats st;
  // Label tokens per slot over all ranks: each tenant's loss normalisation.
  at::Tensor counts = at::zeros({S + 1}, at::kDouble);  // [slot..., tokens]
  for (const auto& b : micro_batches) {
    at::Tensor per_row = b.labels.narrow(1, 1, b.labels.size(1) - 1).ne(kIgnoreIndex).sum(1);  // [B]
    counts.narrow(0, 0, S).index_add_(0, b.row_tags, per_row.to(at::kDouble));
    counts[S] += b.segment_ids.ge(0).sum().item<double>();
  }
  comm_->all_reduce_sum(counts);
  std::vector<double> label_tokens(S);
  for (int64_t s = 0; s < S; ++s) label_tokens[s] = counts[s].item<double>();
  st.tokens = int64_t(counts[S].item<double>());
  for (auto& p : trainable_) p.mutable_grad() = at::Tensor();
  at::Tensor ce = at::zeros({S}, at::kDouble);  // [S] CE sum per slot (this rank's, then all)
  if (fsdp_) fsdp_->begin_root();
  for (const auto& b : micro_batches) {
    auto tf = clock::now();
    bank_->set_rows(b.row_tags);
    ForwardOutput out = model_->forward(b.input_ids, b.position_ids, b.segment_ids);
    at::Tensor row_ce = token_cross_entropy(*model_, out.hidden, b.labels).sum(1);  // [B]
    // Each row's loss over its tenant's label tokens of the whole step.
    at::Tensor denom = at::tensor(label_tokens, at::kDouble).index_select(0, b.row_tags.to(at::kCPU))
                           .clamp_min(1.0).to(row_ce.device(), row_ce.scalar_type());
    at::Tensor objective = (row_ce / denom).sum();
    ce.index_add_(0, b.row_tags, row_ce.detach().to(at::kCPU, at::kDouble));
    auto tb = clock::now();
    st.forward_seconds += std::chrono::duration<double>(tb - tf).count();
    objective.backward();
    st.backward_seconds += std::chrono::duration<double>(clock::now() - tb).count();
  }
  if (fsdp_) fsdp_->end_root();
  auto to = clock::now();
  all_reduce_grads();
  comm_->all_reduce_sum(ce);
  double ce_total = 0, label_total = 0;
  for (auto& t : tenants_) {
    const int64_t s = t->slot;
    if (label_tokens[s] <= 0) continue;  // no sequence of this tenant: untouched
    ce_total += ce[s].item<double>();
    label_total += label_tokens[s];
    // Its own gradients (when dumped), clipping norm (mesh-aware, as for a single
    // adapter) and AdamW.
    if (!opt_.dump_gradients.empty()) {
      std::vector<std::pair<std::string, at::Tensor>> named;
      for (size_t i = 0; i < t->params.size(); ++i)
        named.emplace_back(t->names[i], t->params[i].grad());  // defined: all_reduce_grads
      write_gradients(opt_.dump_gradients + "/" + t->spec.adapter.name, t->step + 1, std::move(named));
    }
    double norm = clip_gradients(t->params, t->placement);
    ++t->step;
    double lr = t->schedule.at(t->step);
    t->optimizer->step(lr);
    st.tenants.push_back({t->spec.adapter.name, t->step, ce[s].item<double>() / label_tokens[s], norm, lr,
                          int64_t(label_tokens[s])});
  }
  ++step_;
  st.label_tokens = int64_t(label_total);
  st.loss = label_total > 0 ? ce_total / label_total : 0;
  if (!st.tenants.empty()) {
    st.grad_norm = st.tenants.front().grad_norm;
    st.lr = st.tenants.front().lr;
  }
  st.optimizer_seconds = std::chrono::duration<double>(clock::now() - to).count();
  st.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return st;
}

}  // namespace glint
