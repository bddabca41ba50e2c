#include "train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <cstdio>

#include "core/compat.h"
#include "core/cpu_threads.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "data/collate.h"
#include "data/lengths.h"
#include "data/sampler.h"
#include "data/synthetic.h"
#include "data/text_dataset.h"
#include "dist/comm.h"
#include "generate/generate.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "lora/peft_io.h"
#include "model/weights.h"
#include "parallel/expert_parallel.h"
#include "parallel/fsdp.h"
#include "parallel/parallelize.h"
#include "train/memory_estimate.h"
#include "train/metrics.h"
#include "train/run_loop.h"

namespace glint {

Trainer::Trainer(TrainOptions options, std::shared_ptr<Comm> comm)
    : opt_(std::move(options)), comm_(comm ? std::move(comm) : Comm::create(World{})) {
  opt_.validate();
  const int W = comm_->size();
  GLINT_USAGE_CHECK(opt_.optim.batch_size % W == 0, "--batch-size (", opt_.optim.batch_size,
              ") must be a multiple of the number of ranks (", W, ")");
  if (opt_.memory.micro_batch_size > 0)
    GLINT_USAGE_CHECK((opt_.optim.batch_size / W) % opt_.memory.micro_batch_size == 0, "each rank's share of --batch-size (",
                opt_.optim.batch_size / W, ") must be a multiple of --micro-batch-size (",
                opt_.memory.micro_batch_size, ")");
  const World here = World::from_env();
  compat::set_cpu_threads(cpu_threads_for(int(opt_.model.threads), here.local_world_size));
  const c10::Device device = resolve_device(opt_.model.device, here.local_rank, "--device");
  TensorPlacement place{resolve_dtype(opt_.model.dtype, device, "--dtype"), device};
  std::unique_ptr<CheckpointReader> checkpoint;
  const bool service = opt_.service.slots > 0;
  builtin_task_ = !service && opt_.data.path.empty() && opt_.tenants.empty();
  if (opt_.model.dir.empty()) {
    model_ = CausalLM(opt_.model.config ? *opt_.model.config
                                        : tiny_moe_config(ReverseDigitsTask::kVocabSize),
                      place);
    init_weights(*model_, opt_.seed);
  } else {
    std::string cfg_path = opt_.model.dir + "/config.json";
    GLINT_CHECK(path_exists(cfg_path), opt_.model.dir, ": no config.json (is this a Hugging Face model directory?)");
    // Built without writing the weights: each rank reads only what it keeps below (its
    // experts under EP; under FSDP nothing here, its shard of every tensor in FsdpRunner).
    TensorPlacement lazy = place;
    lazy.lazy = true;
    ModelConfig config = ModelConfig::from_file(cfg_path);  // its errors first
    checkpoint = open_checkpoint(opt_.model.dir, config);
    model_ = CausalLM(config, lazy);
  }
  check_parallel_options(model_->config, W, opt_.parallel);
  if (opt_.optim.router_bias_update_rate > 0) {
    bool any = false;
    for (int64_t l = 0; l < model_->config.num_hidden_layers; ++l)
      if (DecoderLayer layer = model_->layer(l); layer->moe) any |= layer->moe->gate->e_score_correction_bias.defined();
    GLINT_USAGE_CHECK(any, "--router-bias-update-rate: this ", model_->config.model_type,
                      " model has no router correction bias to update (aux-loss-free balancing is DeepSeek's)");
  }
  // transformers' load-balancing loss is defined on softmax router probabilities; a
  // sigmoid router (DeepSeek-V3) is balanced by its correction bias instead.
  GLINT_USAGE_CHECK(opt_.optim.router_aux_loss_coef <= 0 || model_->config.scoring_func == "softmax",
                    "--router-aux-loss-coef: this ", model_->config.model_type, " model routes with ",
                    model_->config.scoring_func, " scores, for which the load-balancing loss is not defined; use "
                    "--router-bias-update-rate (aux-loss-free balancing)");
  if (opt_.optim.router_aux_loss_coef >= 0) {  // the CLI's choice over config.json's
    model_->config.output_router_logits = opt_.optim.router_aux_loss_coef > 0;
    model_->config.router_aux_loss_coef = opt_.optim.router_aux_loss_coef;
  }
  const int64_t vocab = model_->config.vocab_size;
  // The data before the weights: a bad line costs seconds, not a checkpoint load.
  CollateOptions collate;
  collate.pack = opt_.data.pack;
  std::vector<std::vector<Sample>> tenant_data, tenant_eval;
  std::vector<Sample> samples, eval_samples;  // the run's own (one adapter or --full)
  if (service) {
    collate.seq_len = model_->config.max_position_embeddings;
  } else if (builtin_task_) {
    GLINT_CHECK(vocab >= ReverseDigitsTask::kVocabSize, "the built-in task needs a vocabulary of ",
                ReverseDigitsTask::kVocabSize, " tokens; the model has ", vocab);
    ReverseDigitsTask task;
    samples = task.generate(20000, opt_.seed + 1);
    collate.seq_len = opt_.data.seq_len > 0 ? opt_.data.seq_len : task.max_sample_len();
    collate.pad_id = ReverseDigitsTask::kPad;
    LengthReport cut = fit_to_length(&samples, collate.seq_len);
    if (cut.cut > 0) report_.push_back("built-in task: " + cut.summary());
    GLINT_CHECK(!samples.empty(), "--seq-len ", collate.seq_len, " leaves no built-in task sample with a trained token");
    report_.push_back(epoch_line("built-in task", samples, opt_.optim.steps, opt_.optim.batch_size));
  } else {
    std::vector<std::string> paths, eval_paths;
    if (opt_.tenants.empty()) {
      paths.push_back(opt_.data.path);
      eval_paths.push_back(opt_.data.eval_path);
    }
    for (const TenantSpec& t : opt_.tenants) {
      paths.push_back(t.data);
      eval_paths.push_back(t.eval_data);
    }
    data_.reset(new DataState{collate});  // load_data sets seq_len and pad_id
    std::vector<std::vector<Sample>> evals;
    std::vector<std::vector<Sample>> sets = load_data(paths, eval_paths, vocab, &evals);
    if (opt_.tenants.empty()) eval_samples = std::move(evals[0]);
    else tenant_eval = std::move(evals);
    collate = data_->collate;
    if (opt_.tenants.empty()) {
      samples = std::move(sets[0]);
      if (opt_.optim.steps == 0) opt_.optim.steps = steps_for_epochs(samples.size(), opt_.optim.batch_size);
      report_.push_back(epoch_line(opt_.data.path, samples, opt_.optim.steps, opt_.optim.batch_size));
    } else {
      tenant_data = std::move(sets);
    }
  }
  data_.reset(new DataState{collate});
  // The built-in task's validation set, cut to its length.
  auto load_eval = [&](const std::string& path) {
    int64_t pad = data_->collate.pad_id;
    std::vector<Sample> set = read_data(path, vocab, &pad);
    LengthReport r = fit_to_length(&set, data_->collate.seq_len);
    if (r.cut > 0) report_.push_back(path + ": " + r.summary());
    GLINT_CHECK(!set.empty(), path, ": no validation sample keeps a trained token within --seq-len ",
                data_->collate.seq_len);
    return set;
  };
  if (builtin_task_ && !opt_.data.eval_path.empty()) eval_samples = load_eval(opt_.data.eval_path);
  ParallelLayout layout = parallelize(*model_, comm_, opt_.parallel, checkpoint.get(), opt_.full);
  layout_ = std::make_unique<ParallelLayout>(layout);
  report_.insert(report_.end(), layout.report.begin(), layout.report.end());
  // Adapters are built on the layers' shapes (under FSDP the layers hold shards).
  auto with_shapes = [&](const std::function<void()>& fn) {
    if (FsdpRunner* f = fsdp_runner()) f->with_layer_shapes(fn);
    else fn();
  };
  if (!opt_.tenants.empty() || service) {
    int64_t slots = opt_.service.slots, r_max = opt_.service.r_max;
    if (!service) {
      slots = int64_t(opt_.tenants.size());
      for (const auto& t : opt_.tenants) r_max = std::max(r_max, t.adapter.lora.r);
    }
    with_shapes([&] { bank_ = std::make_unique<TenantBank>(*model_, slots, r_max); });
  }
  engine_ = std::make_unique<StepEngine>(*model_, StepParallel{comm_, layout.ep, layout.expert_replicas, layout.fsdp},
                                         bank_.get());
  const AdamWOptions& run_adam = opt_.optim.adam;
  Learner* own = nullptr;  // the run's own learner (one adapter, or --full)
  if (opt_.full && fsdp_runner()) {  // nothing replicated: every trainable tensor is a shard
    own = &engine_->add_shards(fsdp_runner()->shards(), run_adam);
  } else if (opt_.full) {
    std::vector<std::pair<std::string, at::Tensor>> named;
    std::vector<bool> expert;
    for (auto& site : parameter_sites(*model_)) {
      named.emplace_back(site.name, site.tensor);
      expert.push_back(site.expert);
    }
    own = &engine_->add("", 0, named, expert, &run_adam);
  } else if (!opt_.tenants.empty()) {
    with_shapes([&] { setup_tenants(std::move(tenant_data), std::move(tenant_eval)); });
  } else if (!service) {  // the service's tenants come later (add_service_tenant)
    with_shapes([&] {
      if (opt_.init_adapter.empty()) {
        lora_ = apply_lora(*model_, opt_.lora, opt_.seed + 2);
      } else {  // its rank, alpha and targets: training continues from it
        lora_ = load_adapter(opt_.init_adapter, *model_);
        opt_.lora = lora_.options;
        report_.push_back("--init-adapter " + opt_.init_adapter + ": LoRA r=" + std::to_string(opt_.lora.r) +
                          ", alpha " + nlohmann::json(opt_.lora.alpha).dump() + ", " +
                          std::to_string(lora_.sites.size()) + " adapted sites; training continues from its weights");
      }
    });
    lora_.train(true);
    own = &engine_->add("", 0, lora_.named_parameters(), lora_.expert_parameters(), &run_adam);
    own->lora = opt_.lora;
  }
  if (own) {
    own->samples = std::move(samples);
    own->eval_samples = std::move(eval_samples);
    if (!service) own->sampler = std::make_unique<EpochSampler>(own->samples.size(), opt_.seed);
    own->batch_size = opt_.optim.batch_size;
    own->steps = opt_.optim.steps;
    own->schedule.peak_lr = opt_.optim.lr;
    own->schedule.total_steps = opt_.optim.steps;
    own->schedule.warmup_steps = opt_.optim.warmup_steps >= 0 ? opt_.optim.warmup_steps : opt_.optim.steps / 20;
    own->schedule.min_lr_ratio = opt_.optim.min_lr_ratio;
  }
  refresh_adapter_inputs();
  // Dropout draws from the default generators: seeded per rank, saved in checkpoints.
  at::manual_seed(opt_.seed * 1000003 + uint64_t(comm_->rank()));
  if (!opt_.run.resume.empty()) resume(opt_.run.resume);
  if (service) micro_batch_size_ = opt_.memory.micro_batch_size;  // 0: a rank's whole share at once
  else plan_memory();
}

Trainer::~Trainer() = default;

std::vector<Batch> Trainer::next_micro_batches() {
  // Every rank draws the same global batch of each learner still training and keeps its
  // contiguous share, so the split does not change which samples a step sees.
  const int W = comm_->size(), r = comm_->rank();
  std::vector<Batch> parts;
  for (const auto& l : learners()) {
    if (l->step >= l->steps) continue;
    std::vector<size_t> idx = l->sampler->next(l->batch_size);
    const int64_t share = l->batch_size / W;
    std::vector<const Sample*> picked;
    for (int64_t i = r * share; i < (r + 1) * share; ++i) picked.push_back(&l->samples[idx[i]]);
    if (!bank_) {
      // Several micro-batches without packing: samples of like length share one, so each
      // is padded less. The step's loss is a sum over its samples: the order does not
      // change it.
      if (!data_->collate.pack && micro_batch_size_ < int64_t(picked.size()))
        std::stable_sort(picked.begin(), picked.end(), [](const Sample* a, const Sample* b) {
          return a->input_ids.size() > b->input_ids.size();
        });
      return collate(picked, data_->collate, micro_batch_size_);
    }
    // A tenant's share in one batch (packed per tenant with --pack), its rows tagged.
    std::vector<Batch> one = collate(picked, data_->collate, int64_t(picked.size()));
    GLINT_ASSERT(one.size() == 1);
    one[0].row_tags = at::full({one[0].input_ids.size(0)}, l->slot, at::kLong);
    parts.push_back(std::move(one[0]));
  }
  GLINT_ASSERT(!parts.empty(), "no learner has steps left");
  return split_rows(concat_rows(parts, data_->collate.pad_id), micro_batch_size_);
}

StepStats Trainer::step(const std::vector<Batch>& micro_batches) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  StepStats st;
  const int64_t slots = bank_ ? bank_->num_slots() : 1;
  StepEngine::Counts counts = engine_->count_tokens(micro_batches, slots);
  st.tokens = counts.tokens;
  double label_total = 0;
  for (double n : counts.label_tokens) label_total += n;
  GLINT_CHECK(label_total > 0, "step ", step_ + 1, ": the batch has no label tokens to train on");
  for (const auto& l : learners()) engine_->zero_grad(*l);
  const double coef = model_->config.router_aux_loss_coef;
  MicroBatchPass pass = engine_->forward_backward(
      micro_batches, slots, StepEngine::training_objective(counts.label_tokens, coef, counts.micro_batches),
      /*backward=*/true, /*router_stats=*/true);
  st.forward_seconds = pass.forward_seconds;
  st.backward_seconds = pass.backward_seconds;
  auto to = clock::now();
  std::vector<Learner*> all;
  for (const auto& l : learners()) all.push_back(l.get());
  engine_->reduce(all);
  at::Tensor sums = at::cat({pass.ce, at::tensor({pass.aux_loss}, at::kDouble)});  // [slots..., aux]
  comm_->all_reduce_sum(sums);
  double ce_total = 0;
  for (int64_t s = 0; s < slots; ++s) ce_total += sums[s].item<double>();
  st.label_tokens = int64_t(label_total);
  st.loss = ce_total / label_total;
  if (pass.has_aux) st.aux_loss = sums[slots].item<double>() / counts.micro_batches;
  if (pass.expert_tokens.defined()) {
    at::Tensor load = pass.expert_tokens.to(at::kDouble).contiguous();
    comm_->all_reduce_sum(load);
    st.idle_experts = load.eq(0).sum().item<int64_t>();
    st.expert_load_max = (std::get<0>(load.max(1)) / load.mean(1)).max().item<double>();
    // The same global load on every rank: every copy of the biases moves alike.
    if (opt_.optim.router_bias_update_rate > 0) update_router_biases(*model_, load, opt_.optim.router_bias_update_rate);
  }
  // Each learner with sequences in the step: its own gradients (when dumped), clipping
  // norm and AdamW on its own schedule. A tenant without one is untouched.
  for (const auto& l : learners()) {
    const double n = counts.label_tokens[size_t(l->slot)];
    if (n <= 0) continue;
    if (!opt_.run.dump_gradients.empty())
      dump_gradients(*l, bank_ ? opt_.run.dump_gradients + "/" + l->name : opt_.run.dump_gradients, l->step + 1);
    const double norm = engine_->clip(*l, opt_.optim.max_grad_norm);
    const double lr = l->schedule.at(l->step + 1);
    engine_->update(*l, lr);
    if (bank_) {
      st.tenants.push_back({l->name, l->step, sums[l->slot].item<double>() / n, norm, lr, int64_t(n)});
    } else {
      st.grad_norm = norm;
      st.lr = lr;
    }
  }
  ++step_;
  st.optimizer_seconds = std::chrono::duration<double>(clock::now() - to).count();
  st.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return st;
}

uint64_t Trainer::bytes_sent() const { return layout_->bytes_sent(); }

FsdpRunner* Trainer::fsdp_runner() const { return layout_->fsdp.get(); }

int64_t Trainer::local_weight_bytes() const {
  auto bytes = [](const at::Tensor& t) { return int64_t(t.numel()) * int64_t(t.element_size()); };
  int64_t n = 0;
  for (const auto& p : model_->parameters()) n += bytes(p);  // sharded layers hold 0 elements
  if (FsdpRunner* f = fsdp_runner())
    for (const auto& s : f->shards()) n += bytes(s);
  // Adapters (a --full run's tensors are the parameters counted above) and optimizer state.
  for (const auto& l : learners()) {
    if (!opt_.full)
      for (const auto& p : l->params) n += bytes(p);
    if (l->optimizer) n += l->optimizer->state_bytes();
  }
  return n;
}

void Trainer::dump_gradients(const Learner& learner, const std::string& dir, int64_t step) {
  // Full gradients under the trainable tensors' names; shards and expert slices are
  // gathered (collective: every rank takes part).
  std::vector<std::pair<std::string, at::Tensor>> named;
  auto grad = [](const at::Tensor& p) { return p.grad().defined() ? p.grad() : at::zeros_like(p); };
  if (opt_.full && fsdp_runner()) {
    std::vector<at::Tensor> grads;
    for (const auto& s : learner.params) grads.push_back(grad(s));
    std::set<std::string> expert_names;
    for (const ParameterSite& site : parameter_sites(*model_))
      if (site.expert) expert_names.insert(site.name);
    named = fsdp_runner()->gather_named(grads);
    for (auto& [name, t] : named)
      if (expert_names.count(name)) t = engine_->all_experts(t);
  } else {
    for (size_t i = 0; i < learner.params.size(); ++i) {
      at::Tensor g = grad(learner.params[i]);
      named.emplace_back(learner.names[i], learner.expert[i] ? engine_->all_experts(g) : g);
    }
  }
  if (comm_->rank() != 0) return;
  make_dirs(dir);
  write_safetensors(dir + "/step_" + std::to_string(step) + ".safetensors", named);
}

double Trainer::evaluate_exact_match(int64_t count, uint64_t seed) {
  ReverseDigitsTask task;
  std::vector<Sample> held_out = task.generate(count, seed);
  std::vector<std::vector<int64_t>> prompts;
  for (const auto& s : held_out) prompts.push_back(ReverseDigitsTask::prompt_of(s));
  if (FsdpRunner* f = fsdp_runner()) f->gather(f->root_unit());
  lora_.train(false);  // no dropout while evaluating
  std::vector<GenerationRequest> requests(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests[i].prompt = prompts[i];
    requests[i].sampling.max_new_tokens = task.max_digits + 1;
    requests[i].sampling.stop_token_ids = {ReverseDigitsTask::kEos};
  }
  std::vector<std::vector<int64_t>> generated;
  for (GenerationResult& r : generate(*model_, requests)) generated.push_back(std::move(r.tokens));
  if (FsdpRunner* f = fsdp_runner()) f->release(f->root_unit());
  lora_.train(true);
  int64_t correct = 0;
  for (size_t i = 0; i < held_out.size(); ++i)
    correct += generated[i] == ReverseDigitsTask::answer_of(held_out[i]);
  return double(correct) / double(count);
}

std::vector<Learner*> Trainer::tenant_learners() const {
  std::vector<Learner*> out;
  if (bank_)
    for (const auto& l : learners()) out.push_back(l.get());
  return out;
}

bool Trainer::forwards_are_collective() const { return fsdp_runner() || ep_comm(); }

void Trainer::run() {
  RunLoop loop(*this);
  loop.run();
  stopped_ = loop.stopped();
}

}  // namespace glint
