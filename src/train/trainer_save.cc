// What a run leaves behind: the adapter(s) in PEFT's layout, or the whole model with
// --full, gathered from the ranks' shards and expert slices to rank 0.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "core/fs.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "io/safetensors.h"
#include "lora/peft_io.h"
#include "model/weights.h"
#include "parallel/fsdp.h"
#include "parallel/parallelize.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace glint {

void Trainer::save_full_model() {
  // Collective: every rank gathers the sharded layers; under EP, the ranks of rank 0's EP
  // group gather their experts to rank 0 one layer at a time; rank 0 writes.
  const bool lead = comm_->rank() == 0;
  if (FsdpRunner* f = fsdp_runner())
    for (int64_t u = 0; u < f->num_units(); ++u) f->gather(u);
  // Each packed expert tensor (weights and any biases), restored after.
  const PackedExpert kPacked[] = {PackedExpert::kGateUp, PackedExpert::kDown, PackedExpert::kGateUpBias,
                                  PackedExpert::kDownBias};
  std::vector<std::pair<ExpertsImpl*, std::vector<at::Tensor>>> local;
  Comm* ep = ep_comm();
  if (ep && layout_->mesh->coordinate("ep_fsdp") == 0) {
    at::NoGradGuard no_grad;
    for (int64_t l = 0; l < model_->config.num_hidden_layers; ++l) {
      DecoderLayer layer = model_->layer(l);
      if (!layer->moe) continue;
      ExpertsImpl& ex = *layer->moe->experts;
      std::vector<at::Tensor> whole, mine;
      for (PackedExpert t : kPacked)
        whole.push_back(ex.packed(t).defined() ? ep->gather(ex.packed(t).detach(), 0) : at::Tensor());
      if (!lead) continue;
      for (size_t i = 0; i < whole.size(); ++i) {
        at::Tensor& p = ex.packed(kPacked[i]);
        mine.push_back(p.defined() ? p.detach().clone() : at::Tensor());
        if (p.defined()) p.set_(whole[i]);
      }
      local.push_back({&ex, std::move(mine)});
      ex.first_expert = 0;
    }
  }
  if (lead) {
    save_pretrained(*model_, opt_.run.output + "/model");
    // The tokenizer too, so the directory is a whole model (transformers, vLLM, --model).
    const std::string tokenizer = opt_.data.tokenizer.empty() ? opt_.model.dir : opt_.data.tokenizer;
    if (!tokenizer.empty()) copy_tokenizer_files(tokenizer, opt_.run.output + "/model");
  }
  {
    at::NoGradGuard no_grad;
    for (auto& [ex, mine] : local) {
      for (size_t i = 0; i < mine.size(); ++i)
        if (mine[i].defined()) ex->packed(kPacked[i]).set_(mine[i]);
      ex->first_expert = ep->rank() * mine[0].size(0);
    }
  }
  if (FsdpRunner* f = fsdp_runner())
    for (int64_t u = 0; u < f->num_units(); ++u) f->release(u);
}

void Trainer::save_outputs() {
  if (opt_.full) return save_full_model();
  if (bank_) {
    for (int64_t slot = 0; slot < bank_->num_slots(); ++slot)
      save_lora(bank_->adapter(slot), opt_.run.output + "/" + bank_->tenant(slot).name + "/adapter");
    return;
  }
  save_lora(lora_, opt_.run.output + "/adapter");
  // Balancing moved the base model's router biases: saved beside the adapter under
  // their Hub names, to be loaded over the base model's.
  if (opt_.optim.router_bias_update_rate > 0 && comm_->rank() == 0)
    write_safetensors(opt_.run.output + "/adapter/" + kRouterBiasesFile, router_biases(*model_));
}

void Trainer::save_random_base() {
  // The built-in base model is random: written before the first step, so that the final
  // adapter and every checkpoint's (glint export) have it beside them
  // (glint generate --model OUT/base-model --adapter OUT/adapter).
  if (!opt_.model.dir.empty() || opt_.model.config || comm_->rank() != 0) return;
  if (path_exists(opt_.run.output + "/base-model/config.json")) return;
  CausalLM base(model_->config, TensorPlacement{model_->placement.dtype, c10::Device(c10::kCPU)});
  init_weights(*base, opt_.seed);
  save_pretrained(*base, opt_.run.output + "/base-model");
}

std::string Trainer::base_model_name() const {
  return !opt_.model.dir.empty() ? opt_.model.dir
         : opt_.model.config    ? "glint/random-" + model_->config.model_type
                                : opt_.run.output + "/base-model";
}

void Trainer::save_lora(LoraModel& lora, const std::string& dir, const std::string& base_model) {
  const std::string base = !base_model.empty() ? base_model : base_model_name();
  Comm* ep = ep_comm();
  if (!ep) {
    if (comm_->rank() == 0) save_adapter(dir, lora, base);
    return;
  }
  // Expert adapters hold this EP rank's experts: the ranks of rank 0's EP group gather
  // them to rank 0 (a gather: no other rank holds more than its own), which writes the
  // adapter exactly as a 1-rank run would.
  if (layout_->mesh->coordinate("ep_fsdp") != 0) return;
  LoraModel whole;
  whole.options = lora.options;
  whole.family = lora.family;
  for (const LoraSite& site : lora.sites) {
    if (!site.experts) {
      whole.sites.push_back(site);
      continue;
    }
    at::Tensor A = ep->gather(site.experts->A.detach(), 0), B = ep->gather(site.experts->B.detach(), 0);
    LoraSite s = site;
    s.experts = std::make_shared<LoraExperts>(A, B, site.experts->scale);
    whole.sites.push_back(s);
  }
  if (comm_->rank() == 0) save_adapter(dir, whole, base);
}

}  // namespace glint
