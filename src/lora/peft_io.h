// PEFT adapter files: adapter_config.json + adapter_model.safetensors, with PEFT's key
// names and tensor layouts. This file is the one place that knows them.
//
// Linear site at module path P:  base_model.model.P.lora_A.weight [r, in]
//                                base_model.model.P.lora_B.weight [out, r]
// Expert sites of the family's experts module P (ExpertKeys::peft_module, e.g.
// "model.layers.L.mlp.experts"; PEFT wraps parameters in the experts module's registration
// order, so with both targets gate_up_proj is the inner wrapper):
//   both targets:  gate_up_proj -> "...mlp.experts.base_layer.lora_{A,B}.weight"
//                  down_proj    -> "...mlp.experts.lora_{A,B}.weight"
//   one target:    it           -> "...mlp.experts.lora_{A,B}.weight"
// Expert layouts: glint A [E, r, in] <-> PEFT [E*r, in] (rows expert-major);
//                 glint B [E, out, r] <-> PEFT [out, r*E] (columns (r, E), E fastest).
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <string>
#include <utility>
#include <vector>

#include "lora/lora.h"

namespace glint {

class CausalLMImpl;

// Layout conversions for expert adapters.
at::Tensor expert_A_to_peft(const at::Tensor& A);  // [E,r,in] -> [E*r,in]
at::Tensor expert_B_to_peft(const at::Tensor& B);  // [E,out,r] -> [out,r*E]
at::Tensor expert_A_from_peft(const at::Tensor& A, int64_t num_experts);  // inverse
at::Tensor expert_B_from_peft(const at::Tensor& B, int64_t num_experts);  // inverse

// PEFT key of the A (is_A) or B matrix of `site`, a site of `lora`: a linear's module
// path, or the experts' PEFT module of the adapted family (ExpertKeys::peft_module).
std::string peft_key(const LoraModel& lora, const LoraSite& site, bool is_A);

// Every adapter tensor under its PEFT key, in PEFT layout, on CPU.
std::vector<std::pair<std::string, at::Tensor>> peft_state_dict(LoraModel& lora);

// adapter_config.json of an adapter of `family`'s model: target_parameters in the
// family's spelling (ExpertKeys::peft_target_parameter).
nlohmann::json adapter_config_json(const LoraOptions& options, const ModelFamily& family,
                                   const std::string& base_model_name_or_path);
// Parses adapter_config.json. Errors name the file and the field.
LoraOptions lora_options_from_adapter_config(const std::string& path);

// Writes dir/adapter_config.json and dir/adapter_model.safetensors (each atomically).
void save_adapter(const std::string& dir, LoraModel& lora,
                  const std::string& base_model_name_or_path);

// Router correction biases moved by aux-loss-free balancing during training are saved
// beside the adapter in this file, under their Hub names: they belong to the adapter,
// since the base model's routers route differently without them.
inline constexpr const char* kRouterBiasesFile = "router_biases.safetensors";

// Fills the tensors of `lora` (an adapter of `model`, perhaps expert-parallel) from the
// adapter file in `dir`, whose keys and shapes must be exactly its sites'. Throws
// glint::Error naming the file and key before changing anything.
void read_adapter_weights(const std::string& dir, LoraModel& lora, const CausalLMImpl& model);

// Attaches the adapter stored in `dir` to `model` (replacing nothing: the model must have
// no adapters), and copies dir/router_biases.safetensors over the model's router biases
// when the adapter has one. Missing, unexpected or wrongly shaped keys throw glint::Error
// naming the file and the key.
// Errors of an adapter that does not fit say which base model it was trained on.
LoraModel load_adapter(const std::string& dir, CausalLMImpl& model);

// adapter_config.json's base_model_name_or_path in `dir`, or "" when absent.
std::string adapter_base_model(const std::string& dir);

}  // namespace glint
