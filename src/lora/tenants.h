// Multi-tenant LoRA: many adapters on one frozen base, trained together in the same
// micro-batches.
//
// Each sequence of a micro-batch carries the slot of its tenant (-1: the base model
// alone), set through set_rows(). Every adaptable projection of the model gets a routing
// adapter that applies each slot's LoRA to that slot's rows only: a linear to the slot's
// sequences, a packed expert projection to the slot's routed token copies (their tags
// travel with them through the MoE dispatch, all-to-all included). A tenant's adapter is
// an ordinary LoraModel built by make_lora(): the same initialisation for the same seed,
// the same tensors and PEFT I/O as the single-adapter path, so a tenant trains exactly as
// it would alone.
//
// Legend: B sequences, S tokens per sequence, N routed copies grouped by local expert.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lora/lora.h"
#include "model/adapter.h"

namespace glint {

class CausalLMImpl;

class TenantBank {
 public:
  // Attaches a routing adapter to every projection of `model` that LoRA can target and
  // freezes the base. Room for `slots` tenants of rank up to r_max.
  // REQUIRES: the model has no adapters attached.
  TenantBank(CausalLMImpl& model, int64_t slots, int64_t r_max);
  ~TenantBank();

  // Adds a tenant in the first free slot with a fresh adapter; returns the slot. Throws
  // glint::Error for a duplicate name, no free slot, r > r_max or a target the model lacks.
  int64_t add(const TenantOptions& tenant);
  // Frees the tenant's slot; its adapter is dropped (a later add starts fresh).
  void remove(const std::string& name);
  // Tenant names by slot ("" for a free slot).
  std::vector<std::string> list() const;
  int64_t slot_of(const std::string& name) const;  // -1 when absent
  int64_t num_slots() const { return int64_t(tenants_.size()); }
  int64_t r_max() const { return r_max_; }
  // REQUIRES: slot holds a tenant.
  LoraModel& adapter(int64_t slot);
  const TenantOptions& tenant(int64_t slot) const;

  // The slots of the next micro-batch's sequences: [B] int64, -1 for none. Stays in
  // effect (for the recompute in backward too) until the next call.
  void set_rows(const at::Tensor& slots);

  struct Routing;  // the per-batch rows of each slot, shared with the routing adapters

 private:
  void attach_slot(int64_t slot, LoraModel& lora);
  CausalLMImpl& model_;
  int64_t r_max_;
  std::vector<std::unique_ptr<TenantOptions>> tenants_;  // null: free
  std::vector<std::unique_ptr<LoraModel>> adapters_;
  std::shared_ptr<Routing> routing_;
  std::shared_ptr<TokenTags> tags_;
  struct Sites;
  std::unique_ptr<Sites> sites_;
};

}  // namespace glint
