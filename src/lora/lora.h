// LoRA as a transform of a built model: adapters attached to target linears (PEFT
// target_modules) and to packed expert weights (PEFT target_parameters).
//
// Legend: r rank, in/out features of the adapted projection, E experts held locally.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lora/lora_options.h"
#include "model/adapter.h"

namespace glint {

class CausalLMImpl;
class ModelFamily;

// y += (dropout(x) A^T) B^T * scale; dropout only while training.
class LoraLinear : public LinearAdapter {
 public:
  LoraLinear(at::Tensor A, at::Tensor B, double scale, double dropout = 0.0);
  at::Tensor delta(const at::Tensor& x) const override;
  // Without dropout (or outside training): scale (x Aᵀ) Bᵀ as it is.
  LowRank low_rank(c10::ScalarType dtype) const override {
    if (training && dropout > 0) return {};
    return {A.to(dtype), B.to(dtype), scale};
  }
  // x Aᵀ, and with dropout the dropped copy of x and its mask.
  double kept_per_row() const override { return double(A.size(0)) + (dropout > 0 ? 2.0 * double(A.size(1)) : 0.0); }
  at::Tensor A;  // [r, in]
  at::Tensor B;  // [out, r]
  double scale;
  double dropout;         // probability of zeroing an input element (scaled by 1/(1-p))
  bool training = false;  // dropout applies only while true (LoraModel::train)
};

// y_e += (x_e A_e^T) B_e^T * scale for each expert's token group.
class LoraExperts : public ExpertAdapter {
 public:
  LoraExperts(at::Tensor A, at::Tensor B, double scale);
  at::Tensor delta(const at::Tensor& x, const std::vector<int64_t>& counts,
                   const at::Tensor& tags = at::Tensor()) const override;
  LowRank low_rank(c10::ScalarType dtype) const override { return {A.to(dtype), B.to(dtype), scale}; }
  double kept_per_row() const override { return double(A.size(1)); }
  at::Tensor A;  // [E, r, in]
  at::Tensor B;  // [E, out, r]
  double scale;
};

// One adapted site of the model.
struct LoraSite {
  std::string module_path;  // HF module path: "model.layers.0.self_attn.q_proj" or
                            // "model.layers.0.mlp.experts"
  std::string parameter;    // "" for linears; "gate_up_proj" / "down_proj" for experts
  std::shared_ptr<LoraLinear> linear;    // set for linear sites
  std::shared_ptr<LoraExperts> experts;  // set for expert sites
  int64_t layer = -1;                    // decoder layer
  int64_t first_expert = 0;              // experts: global id of the first local expert
  at::Tensor& A() { return linear ? linear->A : experts->A; }
  at::Tensor& B() { return linear ? linear->B : experts->B; }
  const at::Tensor& A() const { return linear ? linear->A : experts->A; }
  const at::Tensor& B() const { return linear ? linear->B : experts->B; }
};

// The adapters attached to one model.
class LoraModel {
 public:
  LoraOptions options;
  std::vector<LoraSite> sites;  // in model order
  // The adapted model's family: the adapter's expert keys are its names
  // (ModelFamily::expert_keys, lora/peft_io.h). Set by apply_lora and make_lora.
  const ModelFamily* family = nullptr;

  // Trainable tensors, A then B per site: name "<module_path>[.<parameter>].lora_{A,B}".
  std::vector<std::pair<std::string, at::Tensor>> named_parameters();
  std::vector<at::Tensor> parameters();
  // For each of named_parameters(): whether it belongs to an expert site (sliced by expert
  // parallelism).
  std::vector<bool> expert_parameters() const;
  // The trainable tensors of the sites in decoder layer `layer`.
  std::vector<at::Tensor> layer_parameters(int64_t layer);
  void detach_from(CausalLMImpl& model);  // removes every adapter from the model
  // Training mode on or off: dropout (options.dropout) applies only while on. Off after
  // apply_lora / make_lora.
  void train(bool on);
};

// True when any projection of `model` has an adapter attached.
bool has_adapters(CausalLMImpl& model);

// Attaches fresh adapters (A kaiming-uniform a=sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in));
// B zeros) to every target in `model`; freezes the base parameters. Deterministic in
// seed. A target that matches nothing throws glint::Error naming it and the family's
// targets.
LoraModel apply_lora(CausalLMImpl& model, const LoraOptions& options, uint64_t seed);

// The same adapters (same values for the same seed) without attaching them to the model
// or freezing it: the multi-tenant adapter bank routes each tenant's rows through them.
LoraModel make_lora(CausalLMImpl& model, const LoraOptions& options, uint64_t seed);

}  // namespace glint
