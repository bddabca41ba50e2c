// Service mode: the model stays loaded while LoRA tenants come and go, and each call
// (forward, backward, update, save, load, generate) is one collective operation that
// every rank makes with the same arguments. A tenant's rows are split over the ranks as
// a training batch is, its gradients summed over the ranks at its update, so a tenant
// trained through these calls equals the same tenant trained by run() on the same rows.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/fs.h"
#include "dist/comm.h"
#include "generate/generate.h"
#include "io/sharded_state.h"
#include "lora/peft_io.h"
#include "parallel/activation_checkpoint.h"
#include "parallel/fsdp.h"
#include "train/run_checkpoint.h"
#include "train/trainer.h"

namespace glint {

namespace fs = std::filesystem;

Trainer::TenantState& Trainer::service_tenant(const std::string& name) const {
  for (const auto& t : tenants_)
    if (t->spec.adapter.name == name) return *t;
  fail("no tenant '", name, "'");
}

void Trainer::refresh_adapter_inputs() {
  lora_.sites.clear();
  const std::vector<std::string> names = bank_->list();
  for (int64_t slot = 0; slot < bank_->num_slots(); ++slot)
    if (!names[slot].empty())
      for (const LoraSite& site : bank_->adapter(slot).sites) lora_.sites.push_back(site);
  const int64_t L = model_->config.num_hidden_layers;
  std::vector<std::vector<at::Tensor>> per_layer(L);
  for (int64_t l = 0; l < L; ++l) per_layer[l] = layer_trainable_tensors(*model_, l, lora_.layer_parameters(l));
  if (auto* runner = dynamic_cast<RecomputeRunner*>(model_->layer_runner.get())) runner->set_layer_adapters(std::move(per_layer));
}

void Trainer::add_service_tenant(const TenantOptions& tenant, bool trainable) {
  GLINT_ASSERT(bank_ && opt_.service_slots > 0, "add_service_tenant outside service mode");
  int64_t slot = -1;  // add() throws before anything changes; it reads the layers' shapes
  if (fsdp_) fsdp_->with_layer_shapes([&] { slot = bank_->add(tenant); });
  else slot = bank_->add(tenant);
  auto st = std::make_unique<TenantState>();
  st->spec.adapter = tenant;
  st->slot = slot;
  LoraModel& lora = bank_->adapter(slot);
  std::vector<bool> expert = lora.expert_parameters();
  size_t k = 0;
  for (auto& [name, t] : lora.named_parameters()) {
    if (expert[k]) expert_tensor_names_.insert(name);
    Comm* group = expert[k++] ? expert_replicas_.get() : comm_.get();
    if (!trainable) t.set_requires_grad(false);
    st->params.push_back(t);
    st->names.push_back(name);
    st->placement.push_back(Placement{group, group->size()});
  }
  if (trainable) st->optimizer = std::make_unique<AdamW>(st->params, AdamWOptions{});
  tenants_.push_back(std::move(st));
  refresh_adapter_inputs();
}

void Trainer::remove_service_tenant(const std::string& name) {
  for (auto it = tenants_.begin(); it != tenants_.end(); ++it) {
    if ((*it)->spec.adapter.name != name) continue;
    bank_->remove(name);
    tenants_.erase(it);
    refresh_adapter_inputs();
    return;
  }
  fail("no tenant '", name, "' to remove");
}

int64_t Trainer::service_steps_taken(const std::string& name) const {
  const TenantState& t = service_tenant(name);
  return t.optimizer ? t.optimizer->steps_taken() : 0;
}

ServiceForward Trainer::service_forward(const std::vector<ServiceRow>& rows, bool backward) {
  const int W = comm_->size(), rank = comm_->rank();
  const int64_t R = int64_t(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const ServiceRow& row = rows[i];
    GLINT_CHECK(!row.tokens.empty() && row.tokens.size() == row.targets.size(), "row ", i, ": ",
                row.tokens.size(), " tokens and ", row.targets.size(), " targets (need as many, at least one)");
    GLINT_CHECK(row.slot >= 0 && row.slot < bank_->num_slots() && !bank_->list()[size_t(row.slot)].empty(), "row ",
                i, ": slot ", row.slot, " holds no tenant");
  }
  // Each rank's contiguous share. Ranks past the end fill theirs with copies of real rows
  // whose objective is multiplied by zero: every rank runs the same forwards and
  // backwards (the collectives of FSDP and expert parallelism inside the model), each
  // through an adapter, and the copies add exact zeros to the gradients.
  const int64_t share = (R + W - 1) / W;
  const int64_t mb = micro_batch_size_ > 0 ? micro_batch_size_ : std::max<int64_t>(share, 1);
  const int64_t rounds = share == 0 ? 0 : (share + mb - 1) / mb;
  const int64_t S_max = [&] {
    size_t n = 1;
    for (const auto& r : rows) n = std::max(n, r.tokens.size());
    return int64_t(n) + 1;
  }();
  // [R, S_max] target log-probabilities and [R] objectives, filled by the owning rank,
  // summed over ranks at the end.
  const at::ScalarType compute = model_->placement.dtype == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor lp_all = at::zeros({std::max<int64_t>(R, 1), S_max}, at::kDouble);
  at::Tensor obj_all = at::zeros({std::max<int64_t>(R, 1)}, at::kDouble);
  if (fsdp_) fsdp_->begin_root();
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t first = rank * share + round * mb;
    const int64_t n = std::min(mb, share - round * mb);
    // Row b: tokens + one padding position (the labels are shifted by one, so position
    // i's label targets[i] sits at i + 1).
    int64_t S = 2;
    auto source = [&](int64_t b) { return (first + b) % R; };
    for (int64_t b = 0; b < n; ++b) S = std::max<int64_t>(S, int64_t(rows[source(b)].tokens.size()) + 1);
    at::Tensor ids = at::zeros({n, S}, at::kLong), labels = at::full({n, S}, kIgnoreIndex, at::kLong);
    at::Tensor pos = at::zeros({n, S}, at::kLong), seg = at::full({n, S}, -1, at::kLong);
    at::Tensor tags = at::full({n}, -1, at::kLong);
    for (int64_t b = 0; b < n; ++b) {
      const ServiceRow& row = rows[source(b)];
      const int64_t N = int64_t(row.tokens.size());
      auto* pi = ids[b].data_ptr<int64_t>();
      auto* pl = labels[b].data_ptr<int64_t>();
      auto* pp = pos[b].data_ptr<int64_t>();
      auto* ps = seg[b].data_ptr<int64_t>();
      for (int64_t i = 0; i < N; ++i) {
        pi[i] = row.tokens[i];
        pl[i + 1] = row.targets[i];
        pp[i] = i;
        ps[i] = 0;
      }
      tags[b] = row.slot;
    }
    at::Tensor device_ids = ids.to(model_->placement.device);
    bank_->set_rows(tags.to(model_->placement.device));
    at::Tensor objective;
    {
      std::optional<at::NoGradGuard> no_grad;
      if (!backward) no_grad.emplace();
      ForwardOutput out = model_->forward(device_ids, pos.to(model_->placement.device), seg.to(model_->placement.device));
      at::Tensor lp = -token_cross_entropy(*model_, out.hidden, labels).to(compute);  // [n, S-1]
      for (int64_t b = 0; b < n; ++b) {
        const ServiceRow& row = rows[source(b)];
        at::Tensor row_lp = lp[b].narrow(0, 0, int64_t(row.tokens.size()));
        at::Tensor o;
        if (first + b >= R) {
          o = row_lp.sum() * 0.0;  // a copy: zero gradients through the same graph
        } else {
          lp_all[first + b].narrow(0, 0, row_lp.size(0)).copy_(row_lp.detach().to(at::kCPU, at::kDouble));
          if (!row.objective) continue;
          o = row.objective(row_lp);
          GLINT_CHECK(o.dim() == 0, "row ", first + b, ": its objective is not a scalar");
          obj_all[first + b] = o.detach().to(at::kCPU, at::kDouble).item<double>();
        }
        objective = objective.defined() ? objective + o : o;
      }
    }
    if (backward && objective.defined() && objective.requires_grad()) objective.backward();
  }
  if (fsdp_) fsdp_->end_root();
  comm_->all_reduce_sum(lp_all);
  comm_->all_reduce_sum(obj_all);
  ServiceForward result;
  for (int64_t i = 0; i < R; ++i) {
    const int64_t N = int64_t(rows[i].tokens.size());
    at::Tensor row = lp_all[i].narrow(0, 0, N).contiguous();
    result.logprobs.emplace_back(row.data_ptr<double>(), row.data_ptr<double>() + N);
    result.objective.push_back(obj_all[i].item<double>());
  }
  return result;
}

double Trainer::service_optim_step(const std::string& name, const ServiceStep& step) {
  TenantState& t = service_tenant(name);
  GLINT_CHECK(t.optimizer, "tenant '", name, "' is not trained (a sampling adapter)");
  GLINT_CHECK(step.lr >= 0 && std::isfinite(step.lr), "learning_rate must be >= 0, got ", step.lr);
  GLINT_CHECK(step.max_grad_norm >= 0, "grad_clip_norm must be >= 0, got ", step.max_grad_norm);
  t.optimizer->set_options(step.adam);
  all_reduce_grads(t.params, t.placement);
  const double norm = clip_gradients(t.params, t.placement, step.max_grad_norm);
  t.optimizer->step(step.lr);
  ++t.step;
  for (auto& p : t.params) p.mutable_grad() = at::Tensor();
  return norm;
}

namespace {

// A rank's accumulated gradient of tensor `name`: its own, as it holds it (the ranks'
// gradients are summed only at the update), so read back only on the same mesh.
std::string gradient_piece_name(int rank, const std::string& name) {
  return "grad/rank" + std::to_string(rank) + "/" + name;
}

}  // namespace

void Trainer::save_service_state(const std::string& name, const std::string& dir, bool optimizer, bool gradients) {
  TenantState& t = service_tenant(name);
  CheckpointContent c;
  c.step = t.optimizer ? t.optimizer->steps_taken() : 0;
  const LoraOptions& o = t.spec.adapter.lora;
  c.identity = {{"model", model_->family->to_json(model_->config)},
                {"training", "service tenant"},
                {"lora", {{"r", o.r}, {"alpha", o.alpha}, {"rslora", o.use_rslora},
                          {"target_modules", o.target_modules}, {"target_parameters", o.target_parameters}}}};
  c.mesh = {{"world_size", comm_->size()}, {"ep", opt_.ep}, {"ep_layout", opt_.ep_layout}, {"fsdp", opt_.fsdp}};
  c.state = {{"optimizer_steps", c.step}, {"optimizer", optimizer && t.optimizer}, {"gradients", gradients}};
  add_state_pieces(c.pieces, t.params, t.names, optimizer ? t.optimizer.get() : nullptr, false, "");
  if (gradients) {
    nlohmann::json held = nlohmann::json::array();  // which tensors have one on this rank
    for (size_t i = 0; i < t.params.size(); ++i) {
      const at::Tensor& g = t.params[i].grad();
      if (!g.defined()) continue;
      held.push_back(t.names[i]);
      const at::Tensor flat = g.detach().contiguous().reshape({-1});
      c.pieces.push_back({gradient_piece_name(comm_->rank(), t.names[i]), g.sizes().vec(), 0, flat, true});
    }
    c.rank_state = {{"gradients", held}};
  }
  const std::string parent = fs::path(dir).parent_path().string();
  const std::string partial = parent + "/." + fs::path(dir).filename().string() + ".partial";
  write_state_directory(*comm_, partial, dir, c);
}

void Trainer::load_service_state(const std::string& name, const std::string& dir, bool optimizer, bool gradients) {
  TenantState& t = service_tenant(name);
  CheckpointDir ckpt;
  run_collectively(*comm_, [&] { ckpt = find_checkpoint(dir); });
  verify_checkpoint(*comm_, ckpt);
  const nlohmann::json& st = ckpt.manifest.at("state");
  const bool with_optimizer = optimizer && t.optimizer;
  GLINT_CHECK(!with_optimizer || st.value("optimizer", false), dir, ": saved without optimizer state");
  // Read into fresh tensors first: a failure leaves the tenant as it was.
  std::vector<at::Tensor> params;
  for (const auto& p : t.params) params.push_back(at::empty_like(p.detach()));
  std::unique_ptr<AdamW> opt;
  if (t.optimizer) {
    opt = std::make_unique<AdamW>(params, t.optimizer->options());
    if (with_optimizer) opt->set_steps_taken(st.at("optimizer_steps").get<int64_t>());
  }
  std::vector<StatePiece> pieces;
  add_state_pieces(pieces, params, t.names, with_optimizer ? opt.get() : nullptr, false, "");
  std::vector<at::Tensor> grads(params.size());
  if (gradients && st.value("gradients", false)) {
    GLINT_CHECK(ckpt.manifest.at("world_size").get<int>() == comm_->size(), dir, ": its gradients were saved on ",
                ckpt.manifest.at("world_size").get<int>(), " ranks, this mesh has ", comm_->size());
    nlohmann::json held;
    run_collectively(*comm_, [&] { held = checkpoint_rank_state(ckpt, comm_->rank()).at("gradients"); });
    for (size_t i = 0; i < params.size(); ++i) {
      if (std::find(held.begin(), held.end(), t.names[i]) == held.end()) continue;
      grads[i] = at::empty_like(params[i]);
      pieces.push_back({gradient_piece_name(comm_->rank(), t.names[i]), grads[i].sizes().vec(), 0,
                        grads[i].reshape({-1}), true});
    }
  }
  run_collectively(*comm_, [&] { read_checkpoint_pieces(ckpt, pieces); });
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    t.params[i].copy_(params[i]);
    t.params[i].mutable_grad() = grads[i];  // undefined unless paged in with its gradients
  }
  // The moments (zero without `optimizer`), masters and step count.
  if (t.optimizer) t.optimizer->copy_state_from(*opt);
}

void Trainer::save_service_adapter(const std::string& name, const std::string& dir, const std::string& base_model) {
  TenantState& t = service_tenant(name);
  save_lora(bank_->adapter(t.slot), dir, base_model);
}

void Trainer::load_service_adapter(const std::string& name, const std::string& dir) {
  TenantState& t = service_tenant(name);
  run_collectively(*comm_, [&] { read_adapter_weights(dir, bank_->adapter(t.slot), *model_); });
}

std::vector<GenerationResult> Trainer::service_generate(const std::vector<GenerationRequest>& requests) {
  if (fsdp_) fsdp_->gather(fsdp_->root_unit());
  GenerateOptions options;
  options.tenants = bank_.get();
  if (comm_->size() > 1)
    options.agree = [this](std::vector<int64_t>& tokens) {
      at::Tensor t = at::tensor(tokens, at::kLong).to(model_->placement.device);
      comm_->broadcast(t, 0);
      t = t.to(at::kCPU).contiguous();
      std::copy_n(t.data_ptr<int64_t>(), tokens.size(), tokens.begin());
    };
  std::vector<GenerationResult> out;
  try {
    out = generate(*model_, requests, {}, options);
  } catch (...) {
    if (fsdp_) fsdp_->release(fsdp_->root_unit());
    throw;
  }
  if (fsdp_) fsdp_->release(fsdp_->root_unit());
  return out;
}

}  // namespace glint
