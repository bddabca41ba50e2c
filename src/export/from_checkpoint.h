// What a training checkpoint trained, as the files a finished run leaves: a PEFT adapter
// (a LoRA run), one per tenant (a multi-tenant run), or a whole Hugging Face model (--full).
// A checkpoint saved on any mesh (ranks, --ep, --fsdp) is read on one process, so an
// interrupted run, or its best step, can be tried, merged and shipped like a finished one.
#pragma once

#include <string>
#include <vector>

#include "lora/lora.h"

namespace glint {

class CausalLMImpl;
struct CheckpointDir;

// Whether `path` names a glint checkpoint (a step-N directory with manifest.json) or a run
// directory holding one, rather than a PEFT adapter directory.
bool is_checkpoint_path(const std::string& path);

// What a checkpoint trained: "lora", "tenants" or "full"; and the tenants' names.
struct CheckpointTraining {
  std::string kind;
  std::vector<std::string> tenants;
  std::string base_model;  // the run's --model (or its built-in base, OUT/base-model)
};
CheckpointTraining checkpoint_training(const CheckpointDir& ckpt);

// Attaches the adapter that a LoRA checkpoint holds (tenant `tenant`'s for a multi-tenant
// run; "" otherwise) to `model`, as load_adapter attaches a PEFT directory's, router
// biases included. Throws glint::Error naming the checkpoint when it trained the whole
// model, names no such tenant, or was trained on another model (the differences in its
// config.json, and the run's base model).
LoraModel adapter_from_checkpoint(const CheckpointDir& ckpt, CausalLMImpl& model, const std::string& tenant);

// Attaches the adapter in `path` to `model`: a PEFT adapter directory (load_adapter), or
// a glint checkpoint or run directory (adapter_from_checkpoint, a tenant run's checkpoint
// with `tenant`). Errors name `flag` and `path`, and the adapter's base model when it does
// not fit `model`.
LoraModel load_adapter_or_checkpoint(const std::string& path, CausalLMImpl& model, const std::string& tenant,
                                     const std::string& flag);

struct ExportReport {
  std::string kind;                // "lora", "tenants" or "full"
  std::vector<std::string> dirs;   // what was written: the adapter(s) or the model
  int64_t step = 0;
};

// glint export: writes what the checkpoint at `path` (a checkpoint directory, or a run
// directory's latest) trained into `out`: the adapter (adapter_config.json,
// adapter_model.safetensors, router_biases.safetensors when balancing moved them), each
// tenant's into out/<tenant>/ (or only `tenant`'s, into out), or the model with the base's
// tokenizer files (--full). `out` must not exist or be empty, unless overwrite; it is
// written beside itself and renamed into place, so a failure leaves nothing there.
ExportReport export_checkpoint(const std::string& path, const std::string& out, const std::string& tenant,
                               bool overwrite);

}  // namespace glint
