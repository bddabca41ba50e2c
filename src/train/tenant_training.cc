// Multi-tenant LoRA training: each tenant is a learner of the step core
// (train/step_engine.h) with its own data, schedule and AdamW, so a tenant trains exactly
// as it would alone on the same samples.
#include <ATen/ATen.h>

#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "core/fs.h"
#include "data/sampler.h"
#include "dist/comm.h"
#include "train/trainer.h"

namespace glint {

TenantSpec TenantSpec::parse(const std::string& text, const TrainOptions& d) {
  TenantSpec t;
  t.adapter.lora = d.lora;
  t.seed = d.seed;
  t.warmup_steps = d.optim.warmup_steps;
  t.adam = d.optim.adam;
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
  if (t.steps == 0) t.steps = d.optim.steps;
  if (t.batch_size == 0) t.batch_size = d.optim.batch_size;
  if (t.lr == 0) t.lr = d.optim.lr;
  t.adam.validate("--tenant " + text);
  t.adapter.seed = t.seed + 2;  // as apply_lora's seed in a single-adapter run
  return t;
}

void Trainer::setup_tenants(std::vector<std::vector<Sample>> data, std::vector<std::vector<Sample>> eval) {
  const int W = comm_->size();
  int64_t steps = 0;
  for (size_t i = 0; i < opt_.tenants.size(); ++i) {
    if (opt_.tenants[i].steps == 0) opt_.tenants[i].steps = steps_for_epochs(data[i].size(), opt_.tenants[i].batch_size);
    const TenantSpec& spec = opt_.tenants[i];
    GLINT_CHECK(spec.batch_size % W == 0, "tenant ", spec.adapter.name, ": batch (", spec.batch_size,
                ") must be a multiple of the number of ranks (", W, ")");
    const int64_t slot = bank_->add(spec.adapter);
    LoraModel& adapter = bank_->adapter(slot);
    Learner& l = engine_->add(spec.adapter.name, slot, adapter.named_parameters(), adapter.expert_parameters(),
                              &spec.adam);
    l.lora = spec.adapter.lora;
    l.samples = std::move(data[i]);
    l.eval_samples = std::move(eval[i]);
    report_.push_back(epoch_line("tenant " + spec.adapter.name, l.samples, spec.steps, spec.batch_size));
    l.sampler = std::make_unique<EpochSampler>(l.samples.size(), spec.seed);
    l.batch_size = spec.batch_size;
    l.steps = spec.steps;
    l.schedule.peak_lr = spec.lr;
    l.schedule.total_steps = spec.steps;
    l.schedule.warmup_steps = spec.warmup_steps >= 0 ? spec.warmup_steps : spec.steps / 20;
    l.schedule.min_lr_ratio = opt_.optim.min_lr_ratio;
    steps = std::max(steps, spec.steps);
  }
  opt_.optim.steps = steps;  // the run lasts until the last tenant is done
}

}  // namespace glint
