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
#include "model/causal_lm.h"
#include "parallel/fsdp.h"
#include "parallel/parallelize.h"
#include "train/run_checkpoint.h"
#include "train/trainer.h"

namespace glint {

namespace fs = std::filesystem;

Learner& Trainer::service_tenant(const std::string& name) const {
  Learner* l = engine_->find(name);
  GLINT_CHECK(l, "no tenant '", name, "'");
  return *l;
}

void Trainer::refresh_adapter_inputs() {
  // The layers' grad inputs (recompute, FSDP) are the adapters in use: the run's own, or
  // every tenant's in the bank.
  layout_->set_layer_adapters(*model_, [&](int64_t layer) {
    if (!bank_) return lora_.layer_parameters(layer);
    std::vector<at::Tensor> all;
    const std::vector<std::string> names = bank_->list();
    for (int64_t slot = 0; slot < bank_->num_slots(); ++slot) {
      if (names[size_t(slot)].empty()) continue;
      std::vector<at::Tensor> mine = bank_->adapter(slot).layer_parameters(layer);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    return all;
  });
}

void Trainer::add_service_tenant(const TenantOptions& tenant, bool trainable) {
  GLINT_ASSERT(bank_ && opt_.service.slots > 0, "add_service_tenant outside service mode");
  int64_t slot = -1;  // add() throws before anything changes; it reads the layers' shapes
  if (FsdpRunner* f = fsdp_runner()) f->with_layer_shapes([&] { slot = bank_->add(tenant); });
  else slot = bank_->add(tenant);
  LoraModel& lora = bank_->adapter(slot);
  const AdamWOptions adam;  // each update sends its own
  Learner& l = engine_->add(tenant.name, slot, lora.named_parameters(), lora.expert_parameters(),
                            trainable ? &adam : nullptr);
  l.lora = tenant.lora;
  refresh_adapter_inputs();
}

void Trainer::remove_service_tenant(const std::string& name) {
  GLINT_CHECK(engine_->find(name), "no tenant '", name, "' to remove");
  bank_->remove(name);
  engine_->remove(name);
  refresh_adapter_inputs();
}

int64_t Trainer::service_steps_taken(const std::string& name) const {
  const Learner& t = service_tenant(name);
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
  // The micro-batches: row b of round k is row (first_k + b) % R. Each row holds its
  // tokens and one padding position (the labels are shifted by one, so position i's label
  // targets[i] sits at i + 1).
  std::vector<Batch> batches;
  std::vector<int64_t> firsts;
  auto source = [&](int64_t first, int64_t b) { return (first + b) % R; };
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t first = rank * share + round * mb;
    const int64_t n = std::min(mb, share - round * mb);
    int64_t S = 2;
    for (int64_t b = 0; b < n; ++b) S = std::max<int64_t>(S, int64_t(rows[source(first, b)].tokens.size()) + 1);
    Batch batch;
    batch.input_ids = at::zeros({n, S}, at::kLong);
    batch.labels = at::full({n, S}, kIgnoreIndex, at::kLong);
    batch.position_ids = at::zeros({n, S}, at::kLong);
    batch.segment_ids = at::full({n, S}, -1, at::kLong);
    batch.row_tags = at::full({n}, -1, at::kLong);
    for (int64_t b = 0; b < n; ++b) {
      const ServiceRow& row = rows[source(first, b)];
      const int64_t N = int64_t(row.tokens.size());
      auto* pi = batch.input_ids[b].data_ptr<int64_t>();
      auto* pl = batch.labels[b].data_ptr<int64_t>();
      auto* pp = batch.position_ids[b].data_ptr<int64_t>();
      auto* ps = batch.segment_ids[b].data_ptr<int64_t>();
      for (int64_t i = 0; i < N; ++i) {
        pi[i] = row.tokens[i];
        pl[i + 1] = row.targets[i];
        pp[i] = i;
        ps[i] = 0;
      }
      batch.row_tags[b] = row.slot;
      batch.label_tokens += N;
    }
    batches.push_back(std::move(batch));
    firsts.push_back(first);
  }
  // [R, S_max] target log-probabilities and [R] objectives, filled by the owning rank,
  // summed over ranks at the end.
  const at::ScalarType compute = model_->placement.dtype == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor lp_all = at::zeros({std::max<int64_t>(R, 1), S_max}, at::kDouble);
  at::Tensor obj_all = at::zeros({std::max<int64_t>(R, 1)}, at::kDouble);
  // Each row's objective from the log-probabilities of its targets.
  auto objective = [&](size_t k, const Batch& batch, const LossParts& parts) {
    const int64_t first = firsts[k];
    at::Tensor lp = -parts.token_ce.to(compute);  // [n, S-1]
    at::Tensor total;
    for (int64_t b = 0; b < batch.input_ids.size(0); ++b) {
      const ServiceRow& row = rows[source(first, b)];
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
      total = total.defined() ? total + o : o;
    }
    return total;
  };
  engine_->forward_backward(batches, bank_->num_slots(), objective, backward, /*router_stats=*/false);
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
  Learner& t = service_tenant(name);
  GLINT_CHECK(t.optimizer, "tenant '", name, "' is not trained (a sampling adapter)");
  GLINT_CHECK(step.lr >= 0 && std::isfinite(step.lr), "learning_rate must be >= 0, got ", step.lr);
  GLINT_CHECK(step.max_grad_norm >= 0, "grad_clip_norm must be >= 0, got ", step.max_grad_norm);
  t.optimizer->set_options(step.adam);
  engine_->reduce({&t});
  const double norm = engine_->clip(t, step.max_grad_norm);
  engine_->update(t, step.lr);
  engine_->zero_grad(t);
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
  Learner& t = service_tenant(name);
  CheckpointContent c;
  c.step = t.optimizer ? t.optimizer->steps_taken() : 0;
  const LoraOptions& o = t.lora;
  c.identity = {{"model", model_->family->to_json(model_->config)},
                {"training", "service tenant"},
                {"lora", {{"r", o.r}, {"alpha", o.alpha}, {"rslora", o.use_rslora},
                          {"target_modules", o.target_modules}, {"target_parameters", o.target_parameters}}}};
  c.mesh = {{"world_size", comm_->size()}, {"ep", opt_.parallel.ep}, {"ep_layout", opt_.parallel.ep_layout}, {"fsdp", opt_.parallel.fsdp}};
  c.state = {{"optimizer_steps", c.step}, {"optimizer", optimizer && t.optimizer}, {"gradients", gradients}};
  add_state_pieces(c.pieces, t, t.params, optimizer ? t.optimizer.get() : nullptr, "");
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
  Learner& t = service_tenant(name);
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
  add_state_pieces(pieces, t, params, with_optimizer ? opt.get() : nullptr, "");
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
  Learner& t = service_tenant(name);
  save_lora(bank_->adapter(t.slot), dir, base_model);
}

void Trainer::load_service_adapter(const std::string& name, const std::string& dir) {
  Learner& t = service_tenant(name);
  run_collectively(*comm_, [&] { read_adapter_weights(dir, bank_->adapter(t.slot), *model_); });
}

std::vector<GenerationResult> Trainer::service_generate(const std::vector<GenerationRequest>& requests) {
  if (FsdpRunner* f = fsdp_runner()) f->gather(f->root_unit());
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
    if (FsdpRunner* f = fsdp_runner()) f->release(f->root_unit());
    throw;
  }
  if (FsdpRunner* f = fsdp_runner()) f->release(f->root_unit());
  return out;
}

}  // namespace glint
