#include "lora/tenants.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "core/error.h"
#include "model/adaptable.h"
#include "model/causal_lm.h"

namespace glint {

// Row indices of each slot in the current micro-batch, computed once per set_rows().
struct TenantBank::Routing {
  std::vector<at::Tensor> rows_of_slot;  // per slot: [n_s] int64 row indices (may be empty)
  // When every slot's rows form one run and all runs have the same length: the slots in
  // row order (the batched path); else empty.
  std::vector<int64_t> even_runs;
};

namespace {

// A row goes through its own tenant's adapter: the most any slot's adapter keeps per row.
template <typename Adapter>
double most_kept(const std::vector<std::shared_ptr<Adapter>>& slots) {
  double most = 0;
  for (const auto& s : slots)
    if (s) most = std::max(most, s->kept_per_row());
  return most;
}

// Applies each slot's LoRA to the slot's sequences: x [B, S, in] -> [B, S, out].
class TenantLinear : public LinearAdapter {
 public:
  TenantLinear(std::shared_ptr<const TenantBank::Routing> routing, int64_t slots, int64_t out)
      : routing_(std::move(routing)), slots_(slots), out_(out) {}
  at::Tensor delta(const at::Tensor& x) const override {
    if (at::Tensor y = batched(x); y.defined()) return y;
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = out_;
    at::Tensor out = at::zeros(shape, x.options());
    for (size_t s = 0; s < slots_.size(); ++s) {
      const at::Tensor& rows = routing_->rows_of_slot.at(s);
      if (!slots_[s] || rows.numel() == 0) continue;
      out = out.index_add(0, rows, slots_[s]->delta(x.index_select(0, rows)));
    }
    return out;
  }
  // All slots at once when the rows are even runs of slots that all have an adapter here:
  // (x_s A_s^T) B_s^T * scale_s as two batched GEMMs over the slots, ranks zero-padded to
  // the largest (the padding adds exact zeros). Undefined when the batch does not allow it.
  at::Tensor batched(const at::Tensor& x) const {
    const auto& runs = routing_->even_runs;
    if (runs.size() < 2 || !x.is_contiguous()) return at::Tensor();
    int64_t r = 0;
    for (int64_t s : runs) {
      if (!slots_[s]) return at::Tensor();
      r = std::max(r, slots_[s]->A.size(0));
    }
    const int64_t R = int64_t(runs.size()), in = x.size(-1);
    auto dt = x.scalar_type();
    std::vector<at::Tensor> As, Bs;
    std::vector<double> scales;
    for (int64_t s : runs) {
      const LoraLinear& l = *slots_[s];
      int64_t pad = r - l.A.size(0);
      As.push_back(at::constant_pad_nd(l.A.to(dt), {0, 0, 0, pad}));  // [r, in]
      Bs.push_back(at::constant_pad_nd(l.B.to(dt), {0, pad}));        // [out, r]
      scales.push_back(l.scale);
    }
    at::Tensor xs = x.reshape({R, -1, in});                                           // [R, n*S, in]
    at::Tensor u = at::bmm(xs, at::stack(As).transpose(1, 2));                          // [R, n*S, r]
    at::Tensor y = at::bmm(u, at::stack(Bs).transpose(1, 2));                           // [R, n*S, out]
    y = y * at::tensor(scales, at::kDouble).to(y.device(), dt).view({R, 1, 1});
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = out_;
    return y.reshape(shape);
  }
  double kept_per_row() const override { return most_kept(slots_); }
  std::shared_ptr<const TenantBank::Routing> routing_;
  std::vector<std::shared_ptr<LoraLinear>> slots_;  // null where the slot's tenant has none
  int64_t out_;
};

// Applies each slot's expert LoRA to the slot's routed copies: x [N, in] grouped by local
// expert, tags [N] -> [N, out]. A slot's rows keep their order, so they stay grouped.
class TenantExperts : public ExpertAdapter {
 public:
  TenantExperts(int64_t slots, int64_t out) : slots_(slots), out_(out) {}
  at::Tensor delta(const at::Tensor& x, const std::vector<int64_t>& counts,
                   const at::Tensor& tags) const override {
    at::Tensor out = at::zeros({x.size(0), out_}, x.options());
    bool any = false;
    for (const auto& s : slots_) any |= bool(s);
    if (!any) return out;
    GLINT_ASSERT(tags.defined() && tags.size(0) == x.size(0), "expert rows carry no tenant tags");
    const int64_t E = int64_t(counts.size()), S = int64_t(slots_.size());
    // Each row's expert, made on the host from the host's counts: repeat_interleave on a
    // CPU tensor forks the OpenMP team per call, per expert projection and decoded token.
    std::vector<int64_t> row_expert_ids;
    row_expert_ids.reserve(size_t(x.size(0)));
    for (int64_t e = 0; e < E; ++e) row_expert_ids.insert(row_expert_ids.end(), size_t(counts[e]), e);
    at::Tensor expert_of_row = at::tensor(row_expert_ids, at::kLong).to(tags.device());  // [N]
    // Rows by slot (a stable sort keeps each slot's rows grouped by expert), and the
    // [slot, expert] row counts: one host synchronisation for all slots. Rows tagged -1
    // (base model only) sort first and are skipped.
    at::Tensor order = std::get<1>(at::sort(tags, /*stable=*/true, 0, false));  // [N]
    at::Tensor key = (tags.clamp_min(-1) + 1) * E + expert_of_row;              // [N]
    at::Tensor c = at::bincount(key, {}, (S + 1) * E).to(at::kCPU);             // [(S+1)*E]
    const int64_t* cnt = c.data_ptr<int64_t>();
    int64_t offset = 0;
    for (int64_t e = 0; e < E; ++e) offset += cnt[e];  // the untagged rows
    for (int64_t s = 0; s < S; ++s) {
      std::vector<int64_t> slot_counts(cnt + (s + 1) * E, cnt + (s + 2) * E);
      int64_t n = 0;
      for (int64_t v : slot_counts) n += v;
      if (slots_[s] && n > 0) {
        at::Tensor rows = order.narrow(0, offset, n);
        out = out.index_add(0, rows, slots_[s]->delta(x.index_select(0, rows), slot_counts));
      }
      offset += n;
    }
    return out;
  }
  // A row goes through its own tenant's adapter: the largest any slot keeps.
  double kept_per_row() const override { return most_kept(slots_); }
  std::vector<std::shared_ptr<LoraExperts>> slots_;
  int64_t out_;
};

std::string site_key(const std::string& module_path, const std::string& parameter) {
  return parameter.empty() ? module_path : module_path + "." + parameter;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

}  // namespace

struct TenantBank::Sites {
  std::map<std::string, std::shared_ptr<TenantLinear>> linear;
  std::map<std::string, std::shared_ptr<TenantExperts>> expert_tensors;
};

void TenantOptions::validate(int64_t r_max) const {
  GLINT_CHECK(valid_name(name), "tenant name '", name, "' must be letters, digits, '-', '_' or '.'");
  lora.validate("tenant " + name);
  GLINT_CHECK(lora.r <= r_max, "tenant ", name, ": r = ", lora.r, " exceeds the bank's r_max = ", r_max);
}

TenantBank::TenantBank(CausalLMImpl& model, int64_t slots, int64_t r_max)
    : model_(model), r_max_(r_max), tenants_(slots), adapters_(slots),
      routing_(std::make_shared<Routing>()), tags_(std::make_shared<TokenTags>()), sites_(new Sites) {
  GLINT_CHECK(slots >= 1, "tenant bank: slots must be >= 1, got ", slots);
  GLINT_CHECK(r_max >= 1, "tenant bank: r_max must be >= 1, got ", r_max);
  GLINT_CHECK(!has_adapters(model), "tenant bank: the model already has adapters attached");
  {
    at::NoGradGuard no_grad;
    for (auto& p : model.parameters()) p.set_requires_grad(false);
  }
  routing_->rows_of_slot.assign(slots, at::empty({0}, at::kLong));
  for_each_adaptable(model, [&](const Adaptable& a) {
    if (a.linear) {
      auto ad = std::make_shared<TenantLinear>(routing_, slots, a.out_features());
      a.linear->adapter = ad;
      sites_->linear[a.module_path] = ad;
      return;
    }
    auto ad = std::make_shared<TenantExperts>(slots, a.out_features());
    a.expert_adapter() = ad;
    sites_->expert_tensors[a.module_path + "." + a.parameter] = ad;
  });
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l)
    if (DecoderLayer layer = model.layer(l); layer->moe) layer->moe->token_tags = tags_;
}

TenantBank::~TenantBank() = default;

int64_t TenantBank::add(const TenantOptions& t) {
  t.validate(r_max_);
  GLINT_CHECK(slot_of(t.name) < 0, "tenant '", t.name, "' exists already (slot ", slot_of(t.name), ")");
  int64_t slot = -1;
  for (size_t s = 0; s < tenants_.size() && slot < 0; ++s)
    if (!tenants_[s]) slot = int64_t(s);
  GLINT_CHECK(slot >= 0, "tenant '", t.name, "': all ", tenants_.size(), " slots are taken");
  auto lora = std::make_unique<LoraModel>(make_lora(model_, t.lora, t.seed));
  attach_slot(slot, *lora);
  tenants_[slot] = std::make_unique<TenantOptions>(t);
  adapters_[slot] = std::move(lora);
  return slot;
}

void TenantBank::attach_slot(int64_t slot, LoraModel& lora) {
  for (const LoraSite& site : lora.sites) {
    std::string key = site_key(site.module_path, site.parameter);
    if (site.linear) sites_->linear.at(key)->slots_[slot] = site.linear;
    else sites_->expert_tensors.at(key)->slots_[slot] = site.experts;
  }
}

void TenantBank::remove(const std::string& name) {
  int64_t slot = slot_of(name);
  GLINT_CHECK(slot >= 0, "no tenant '", name, "' to remove");
  for (auto& [key, ad] : sites_->linear) ad->slots_[slot].reset();
  for (auto& [key, ad] : sites_->expert_tensors) ad->slots_[slot].reset();
  tenants_[slot].reset();
  adapters_[slot].reset();
}

std::vector<std::string> TenantBank::list() const {
  std::vector<std::string> out;
  for (const auto& t : tenants_) out.push_back(t ? t->name : "");
  return out;
}

int64_t TenantBank::slot_of(const std::string& name) const {
  for (size_t s = 0; s < tenants_.size(); ++s)
    if (tenants_[s] && tenants_[s]->name == name) return int64_t(s);
  return -1;
}

LoraModel& TenantBank::adapter(int64_t slot) {
  GLINT_ASSERT(slot >= 0 && slot < num_slots() && adapters_[slot], "slot ", slot, " holds no tenant");
  return *adapters_[slot];
}

const TenantOptions& TenantBank::tenant(int64_t slot) const {
  GLINT_ASSERT(slot >= 0 && slot < num_slots() && tenants_[slot], "slot ", slot, " holds no tenant");
  return *tenants_[slot];
}

void TenantBank::set_rows(const at::Tensor& slots) {
  GLINT_CHECK(slots.dim() == 1 && slots.scalar_type() == at::kLong, "tenant rows must be a [B] int64 tensor");
  at::Tensor s = slots.to(model_.placement.device);
  GLINT_CHECK(s.numel() == 0 || (s.ge(-1).all().item<bool>() && s.lt(num_slots()).all().item<bool>()),
              "tenant rows hold a slot outside [-1, ", num_slots(), ")");
  for (int64_t k = 0; k < num_slots(); ++k) routing_->rows_of_slot[k] = s.eq(k).nonzero().reshape({-1});
  tags_->rows = s;
  // Even runs: consecutive rows of one slot each, all of one length, no slot twice, no -1.
  routing_->even_runs.clear();
  at::Tensor cpu = s.to(at::kCPU);
  const int64_t* v = cpu.data_ptr<int64_t>();
  const int64_t B = cpu.numel();
  std::vector<int64_t> runs, lengths;
  for (int64_t i = 0; i < B; ++i) {
    if (i == 0 || v[i] != v[i - 1]) {
      runs.push_back(v[i]);
      lengths.push_back(0);
    }
    ++lengths.back();
  }
  bool even = !runs.empty();
  std::vector<bool> seen(num_slots(), false);
  for (size_t k = 0; k < runs.size() && even; ++k) {
    even = runs[k] >= 0 && !seen[runs[k]] && lengths[k] == lengths[0];
    if (even) seen[runs[k]] = true;
  }
  if (even) routing_->even_runs = runs;
}

}  // namespace glint
