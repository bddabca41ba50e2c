// The weight-name registry of the Qwen3 families: every parameter of a CausalLM, the
// Hugging Face keys it comes from, and its expected shape. Loading accepts both the
// per-expert Hub form (mlp.experts.{e}.{gate,up,down}_proj.weight) and the packed
// transformers v5 form (mlp.experts.gate_up_proj [E,2I,H], mlp.experts.down_proj [E,H,I]).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/causal_lm.h"

namespace glint {

class CheckpointReader;

// The checkpoint in `dir` of a model of config `c`, its keys named as the family's weight
// map reads them (ModelFamily::model_key); skipped keys are left out with one log line.
std::unique_ptr<CheckpointReader> open_checkpoint(const std::string& dir, const ModelConfig& c);

// Copies every parameter of `model` from `ckpt`, converting dtypes. Experts load only
// the model's local range [first_expert, first_expert + E_local), reading just those
// bytes. Throws glint::Error naming the key for a missing key, a shape mismatch
// (expected and actual shapes), or a checkpoint key the model does not use.
// With layers = false, decoder layers are skipped (FSDP loads its shards of them itself).
void load_weights(CausalLMImpl& model, const CheckpointReader& ckpt, bool layers = true);

// Elements [start, start + count) of the flattened model parameter at `site` (packed
// expert layout holding all experts, expected `shape`), read from whichever form the
// checkpoint has, converted to `dtype`: only those bytes are read.
at::Tensor read_parameter_range(const CheckpointReader& ckpt, const ParameterSite& site,
                                at::IntArrayRef shape, int64_t start, int64_t count,
                                c10::ScalarType dtype);

// The model's tensors under Hub names, experts split per expert (what transformers'
// save_pretrained writes). REQUIRES: the model holds all experts.
std::vector<std::pair<std::string, at::Tensor>> hub_state_dict(CausalLMImpl& model);

// Per-expert Hub key of expert e's projection ("gate_proj", "up_proj", "down_proj").
std::string expert_key(int64_t layer, int64_t expert, const char* proj);

// Writes config.json and the weights (Hub form) of `model` into `dir`.
void save_pretrained(CausalLMImpl& model, const std::string& dir);

}  // namespace glint

namespace glint {

// Builds the model described by dir/config.json and loads its weights.
CausalLM from_pretrained(const std::string& dir, const TensorPlacement& place);

}  // namespace glint
