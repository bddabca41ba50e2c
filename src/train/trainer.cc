#include "train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <cstdio>
#include <thread>

#include "core/compat.h"
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
#include "dist/mesh.h"
#include "parallel/activation_checkpoint.h"
#include "parallel/expert_parallel.h"
#include "parallel/fsdp.h"
#include "train/memory_estimate.h"
#include "train/metrics.h"

namespace glint {

void TrainOptions::validate() const {
  GLINT_USAGE_CHECK(steps >= 0, "--steps must be positive (or 0: from --epochs), got ", steps);
  GLINT_USAGE_CHECK(std::isfinite(epochs) && epochs >= 0, "--epochs must be positive, got ", epochs);
  GLINT_USAGE_CHECK(steps > 0 || epochs > 0, "--steps 0 counts the steps from --epochs, which is not set");
  GLINT_USAGE_CHECK(steps > 0 || service_slots > 0 || !data.empty() || !tenants.empty(),
                    "--epochs needs --data (the built-in task is endless: give --steps)");
  GLINT_USAGE_CHECK(batch_size > 0, "--batch-size must be positive, got ", batch_size);
  GLINT_USAGE_CHECK(micro_batch_size >= 0, "--micro-batch-size must be >= 0, got ", micro_batch_size);
  GLINT_USAGE_CHECK(fsdp_overlap == "auto" || fsdp_overlap == "on" || fsdp_overlap == "off",
                    "--fsdp-overlap must be auto, on or off, got '", fsdp_overlap, "'");
  if (micro_batch_size > 0)
    GLINT_USAGE_CHECK(batch_size % micro_batch_size == 0, "--batch-size (", batch_size,
                ") must be a multiple of --micro-batch-size (", micro_batch_size, ")");
  GLINT_USAGE_CHECK(seq_len >= 0 && seq_len != 1, "--seq-len must be >= 2, got ", seq_len);
  GLINT_USAGE_CHECK(lr > 0 && std::isfinite(lr), "--lr must be positive, got ", lr);
  GLINT_USAGE_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, "--min-lr-ratio must be in [0, 1], got ",
              min_lr_ratio);
  GLINT_USAGE_CHECK(max_grad_norm >= 0, "--max-grad-norm must be >= 0, got ", max_grad_norm);
  GLINT_USAGE_CHECK(weight_decay >= 0, "--weight-decay must be >= 0, got ", weight_decay);
  GLINT_USAGE_CHECK(threads >= 0, "--threads must be >= 0, got ", threads);
  GLINT_USAGE_CHECK(log_every > 0, "--log-every must be positive, got ", log_every);
  GLINT_USAGE_CHECK(max_bad_lines >= 0, "--max-bad-lines must be >= 0, got ", max_bad_lines);
  GLINT_USAGE_CHECK(tenants.empty() || !full, "--tenant trains LoRA adapters; it does not go with --full");
  GLINT_USAGE_CHECK(service_slots == 0 || (tenants.empty() && data.empty() && !full && resume.empty()),
                    "service mode trains the tenants it is sent: no --data, --tenant, --full or --resume");
  GLINT_USAGE_CHECK(service_slots == 0 || service_r_max > 0, "--max-rank must be positive, got ", service_r_max);
  GLINT_USAGE_CHECK(tenants.empty() || data.empty(), "--data and --tenant do not go together: each tenant names its own data");
  GLINT_USAGE_CHECK(std::isfinite(router_aux_loss_coef), "--router-aux-loss-coef must be a number, got ",
                    router_aux_loss_coef);
  GLINT_USAGE_CHECK(std::isfinite(router_bias_update_rate) && router_bias_update_rate >= 0,
                    "--router-bias-update-rate must be >= 0, got ", router_bias_update_rate);
  GLINT_USAGE_CHECK(tenants.empty() || router_bias_update_rate == 0,
                    "--router-bias-update-rate does not go with --tenant: the tenants share the base model's routers");
  GLINT_USAGE_CHECK(tenants.empty() || router_aux_loss_coef <= 0,
                    "--router-aux-loss-coef does not go with --tenant: the load-balancing loss is a statistic of "
                    "the whole batch and would couple the tenants");
  GLINT_USAGE_CHECK(tenants.empty() || lora.dropout == 0,
                    "--lora-dropout does not go with --tenant (tenant adapters train without dropout)");
  GLINT_USAGE_CHECK(full || lora.r > 0, "--lora-r must be positive, got ", lora.r);
  GLINT_USAGE_CHECK(full || (std::isfinite(lora.alpha) && lora.alpha > 0), "--lora-alpha must be positive, got ",
                    lora.alpha);
  GLINT_USAGE_CHECK(lora.dropout >= 0 && lora.dropout < 1, "--lora-dropout must be in [0, 1), got ", lora.dropout);
  GLINT_USAGE_CHECK(ep >= 1, "--ep must be at least 1, got ", ep);
  auto data_file = [](const std::string& path, const char* flag) {
    GLINT_USAGE_CHECK(path.empty() || path_exists(path), flag, " ", path, ": no such file");
    GLINT_USAGE_CHECK(path.empty() || !is_directory(path), flag, " ", path,
                      " is a directory; it takes one JSONL file (one JSON object per line)");
  };
  data_file(data, "--data");
  data_file(eval_data, "--eval-data");
  GLINT_USAGE_CHECK(eval_every >= 0, "--eval-every must be >= 0, got ", eval_every);
  GLINT_USAGE_CHECK(eval_batches >= 0, "--eval-batches must be >= 0, got ", eval_batches);
  GLINT_USAGE_CHECK(save_every >= 0, "--save-every must be >= 0, got ", save_every);
  GLINT_USAGE_CHECK(stop_after >= 0, "--stop-after must be >= 0, got ", stop_after);
  GLINT_USAGE_CHECK(keep_last >= 0, "--keep-last must be a count of checkpoints or all, got ", keep_last);
  GLINT_USAGE_CHECK(init_adapter.empty() || !full, "--init-adapter starts LoRA training; it does not go with --full");
  GLINT_USAGE_CHECK(init_adapter.empty() || tenants.empty(),
                    "--init-adapter does not go with --tenant (each tenant starts from its own initialisation)");
  GLINT_USAGE_CHECK(init_adapter.empty() || path_exists(init_adapter + "/adapter_config.json"), "--init-adapter ",
                    init_adapter, ": no adapter_config.json (is this a PEFT adapter directory?)");
  for (const TenantSpec& t : tenants) {
    const std::string tenant = "--tenant " + t.adapter.name + ":";
    data_file(t.data, (tenant + " data").c_str());
    data_file(t.eval_data, (tenant + " eval").c_str());
  }
  GLINT_USAGE_CHECK(model_dir.empty() || path_exists(model_dir + "/config.json"), "--model ", model_dir,
                    ": no config.json (is this a Hugging Face model directory?)");
  GLINT_USAGE_CHECK(tokenizer.empty() || path_exists(tokenizer + "/tokenizer.json"), "--tokenizer ", tokenizer,
                    ": no tokenizer.json");
  if (!memory_budget.empty()) parse_memory_size(memory_budget, "--memory-budget");
  if (dtype != "auto") {
    c10::ScalarType dt;
    try {
      dt = parse_dtype(dtype, "--dtype");
    } catch (const Error& e) {
      usage_fail(e.what());
    }
    GLINT_USAGE_CHECK(dt != at::kHalf,
                      "--dtype float16 is not supported for training: its narrow range needs loss scaling to keep "
                      "small gradients from vanishing, which glint does not do; use --dtype bfloat16 (same speed on "
                      "every GPU that has float16 tensor cores since Ampere, and float32's range) or float32");
  }
  GLINT_USAGE_CHECK(device == "auto" || device == "cpu" || device.rfind("cuda", 0) == 0, "--device: unknown device '",
                    device, "' (expected auto, cpu, cuda or cuda:N)");
  GLINT_USAGE_CHECK(device.rfind("cuda", 0) != 0 || at::hasCUDA(), "--device ", device,
                    ": this build of glint has no CUDA, or no GPU is present (glint --version names the libtorch it "
                    "was built against; scripts/build.sh takes a CUDA PyTorch's when python3 can import one)");
  adam.validate("AdamW options");
  if (!full) lora.validate("LoRA options");
}

namespace {

// Collective: what each rank read of the model's checkpoint, for the setup report.
std::string sharded_load_line(Comm& comm, const CheckpointReader& checkpoint) {
  at::Tensor mine = at::tensor({int64_t(checkpoint.bytes_read())}, at::kLong);
  at::Tensor all = comm.all_gather(mine);
  const int W = comm.size();
  char buf[96];
  std::snprintf(buf, sizeof buf, "weights read of the checkpoint's %.3f MB:", double(checkpoint.tensor_bytes()) / 1e6);
  std::string line = buf;
  int64_t sum = 0;
  for (int r = 0; r < W; ++r) {
    const int64_t b = all[r].item<int64_t>();
    sum += b;
    if (W <= 16 || r < 4) {
      std::snprintf(buf, sizeof buf, "%s rank %d %.3f MB", r ? "," : "", r, double(b) / 1e6);
      line += buf;
    } else if (r == 4) {
      line += ", ...";
    }
  }
  std::snprintf(buf, sizeof buf, " (%.3f MB in all)", double(sum) / 1e6);
  return line + buf;
}

}  // namespace

Trainer::Trainer(TrainOptions options, std::shared_ptr<Comm> comm)
    : opt_(std::move(options)), comm_(comm ? std::move(comm) : Comm::create(World{})) {
  opt_.validate();
  const int W = comm_->size();
  GLINT_USAGE_CHECK(opt_.batch_size % W == 0, "--batch-size (", opt_.batch_size,
              ") must be a multiple of the number of ranks (", W, ")");
  if (opt_.micro_batch_size > 0)
    GLINT_USAGE_CHECK((opt_.batch_size / W) % opt_.micro_batch_size == 0, "each rank's share of --batch-size (",
                opt_.batch_size / W, ") must be a multiple of --micro-batch-size (",
                opt_.micro_batch_size, ")");
  compat::set_cpu_threads(opt_.threads > 0 ? int(opt_.threads) : int(std::max(1u, std::thread::hardware_concurrency())));
  const c10::Device device = resolve_device(opt_.device, World::from_env().local_rank, "--device");
  TensorPlacement place{resolve_dtype(opt_.dtype, device, "--dtype"), device};
  std::unique_ptr<CheckpointReader> checkpoint;
  const bool service = opt_.service_slots > 0;
  builtin_task_ = !service && opt_.data.empty() && opt_.tenants.empty();
  const bool ep = opt_.ep > 1;
  if (opt_.model_dir.empty()) {
    model_ = CausalLM(opt_.model_config ? *opt_.model_config
                                        : tiny_moe_config(ReverseDigitsTask::kVocabSize),
                      place);
    init_weights(*model_, opt_.seed);
  } else {
    std::string cfg_path = opt_.model_dir + "/config.json";
    GLINT_CHECK(path_exists(cfg_path), opt_.model_dir, ": no config.json (is this a Hugging Face model directory?)");
    // Built without writing the weights: each rank reads only what it keeps below (its
    // experts under EP; under FSDP nothing here, its shard of every tensor in FsdpRunner).
    TensorPlacement lazy = place;
    lazy.lazy = true;
    ModelConfig config = ModelConfig::from_file(cfg_path);  // its errors first
    checkpoint = open_checkpoint(opt_.model_dir, config);
    model_ = CausalLM(config, lazy);
  }
  validate_expert_mesh(model_->config, W, opt_.ep, opt_.ep_layout);
  if (W > 1) {
    const World world = World::from_env();
    // A Comm made without the launcher's environment (tests) counts as one node.
    const int per_node = world.world_size == W ? world.local_world_size : W;
    report_.push_back(describe_mesh_layout(W, per_node, opt_.ep, opt_.ep_layout, opt_.fsdp));
  }
  expert_replicas_ = comm_;
  if (ep) {
    mesh_ = make_expert_mesh(comm_, opt_.ep, opt_.ep_layout);
    ep_comm_ = mesh_->axis_comm("ep");
    expert_replicas_ = mesh_->axis_comm("ep_fsdp");
    shard_experts(*model_, ep_comm_);
  }
  if (opt_.router_bias_update_rate > 0) {
    bool any = false;
    for (int64_t l = 0; l < model_->config.num_hidden_layers; ++l)
      if (DecoderLayer layer = model_->layer(l); layer->moe) any |= layer->moe->gate->e_score_correction_bias.defined();
    GLINT_USAGE_CHECK(any, "--router-bias-update-rate: this ", model_->config.model_type,
                      " model has no router correction bias to update (aux-loss-free balancing is DeepSeek's)");
  }
  // transformers' load-balancing loss is defined on softmax router probabilities; a
  // sigmoid router (DeepSeek-V3) is balanced by its correction bias instead.
  GLINT_USAGE_CHECK(opt_.router_aux_loss_coef <= 0 || model_->config.scoring_func == "softmax",
                    "--router-aux-loss-coef: this ", model_->config.model_type, " model routes with ",
                    model_->config.scoring_func, " scores, for which the load-balancing loss is not defined; use "
                    "--router-bias-update-rate (aux-loss-free balancing)");
  if (opt_.router_aux_loss_coef >= 0) {  // the CLI's choice over config.json's
    model_->config.output_router_logits = opt_.router_aux_loss_coef > 0;
    model_->config.router_aux_loss_coef = opt_.router_aux_loss_coef;
  }
  const int64_t vocab = model_->config.vocab_size;
  // The data before the weights: a bad line costs seconds, not a checkpoint load.
  CollateOptions collate;
  collate.pack = opt_.pack;
  std::vector<std::vector<Sample>> tenant_data, tenant_eval;
  if (service) {
    collate.seq_len = model_->config.max_position_embeddings;
  } else if (builtin_task_) {
    GLINT_CHECK(vocab >= ReverseDigitsTask::kVocabSize, "the built-in task needs a vocabulary of ",
                ReverseDigitsTask::kVocabSize, " tokens; the model has ", vocab);
    ReverseDigitsTask task;
    samples_ = task.generate(20000, opt_.seed + 1);
    collate.seq_len = opt_.seq_len > 0 ? opt_.seq_len : task.max_sample_len();
    collate.pad_id = ReverseDigitsTask::kPad;
    LengthReport cut = fit_to_length(&samples_, collate.seq_len);
    if (cut.cut > 0) report_.push_back("built-in task: " + cut.summary());
    GLINT_CHECK(!samples_.empty(), "--seq-len ", collate.seq_len, " leaves no built-in task sample with a trained token");
    report_.push_back(epoch_line("built-in task", samples_, opt_.steps, opt_.batch_size));
  } else {
    std::vector<std::string> paths, eval_paths;
    if (opt_.tenants.empty()) {
      paths.push_back(opt_.data);
      eval_paths.push_back(opt_.eval_data);
    }
    for (const TenantSpec& t : opt_.tenants) {
      paths.push_back(t.data);
      eval_paths.push_back(t.eval_data);
    }
    data_.reset(new DataState{std::nullopt, collate});  // load_data sets seq_len and pad_id
    std::vector<std::vector<Sample>> evals;
    std::vector<std::vector<Sample>> sets = load_data(paths, eval_paths, vocab, &evals);
    if (opt_.tenants.empty()) eval_samples_ = std::move(evals[0]);
    else tenant_eval = std::move(evals);
    collate = data_->collate;
    if (opt_.tenants.empty()) {
      samples_ = std::move(sets[0]);
      if (opt_.steps == 0) opt_.steps = steps_for_epochs(samples_.size(), opt_.batch_size);
      report_.push_back(epoch_line(opt_.data, samples_, opt_.steps, opt_.batch_size));
    } else {
      tenant_data = std::move(sets);
    }
  }
  data_.reset(new DataState{std::nullopt, collate});
  if (opt_.tenants.empty() && !service) data_->sampler.emplace(samples_.size(), opt_.seed);  // tenants: setup_tenants
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
  if (builtin_task_ && !opt_.eval_data.empty()) eval_samples_ = load_eval(opt_.eval_data);
  if (checkpoint) load_weights(*model_, *checkpoint, /*parameters=*/!opt_.fsdp);

  // Trainable tensors and where their copies live: non-expert tensors are replicated on
  // every rank, expert tensors on the ranks holding the same experts.
  auto replicated = [&](bool expert) {
    Comm* group = expert ? expert_replicas_.get() : comm_.get();
    return Placement{group, group->size()};
  };
  if (opt_.full) {
    for (auto& site : parameter_sites(*model_)) {
      site.tensor.set_requires_grad(true);
      trainable_.push_back(site.tensor);
      trainable_names_.push_back(site.name);
      placement_.push_back(replicated(site.expert));
      if (site.expert) expert_tensor_names_.insert(site.name);
    }
  } else if (!opt_.tenants.empty()) {
    setup_tenants(std::move(tenant_data), std::move(tenant_eval));
  } else if (service) {  // tenants come later (add_service_tenant)
    bank_ = std::make_unique<TenantBank>(*model_, opt_.service_slots, opt_.service_r_max);
  } else {
    if (opt_.init_adapter.empty()) {
      lora_ = apply_lora(*model_, opt_.lora, opt_.seed + 2);
    } else {  // its rank, alpha and targets: training continues from it
      lora_ = load_adapter(opt_.init_adapter, *model_);
      opt_.lora = lora_.options;
      report_.push_back("--init-adapter " + opt_.init_adapter + ": LoRA r=" + std::to_string(opt_.lora.r) + ", alpha " +
                        nlohmann::json(opt_.lora.alpha).dump() + ", " + std::to_string(lora_.sites.size()) +
                        " adapted sites; training continues from its weights");
    }
    lora_.train(true);
    std::vector<bool> expert = lora_.expert_parameters();
    size_t i = 0;
    for (auto& [name, t] : lora_.named_parameters()) {
      trainable_.push_back(t);
      trainable_names_.push_back(name);
      placement_.push_back(replicated(expert[i]));
      if (expert[i++]) expert_tensor_names_.insert(name);
    }
  }
  if (opt_.fsdp) {
    std::vector<std::vector<at::Tensor>> adapters(model_->config.num_hidden_layers);
    if (!opt_.full)
      for (int64_t l = 0; l < model_->config.num_hidden_layers; ++l)
        adapters[l] = layer_trainable_tensors(*model_, l, lora_.layer_parameters(l));
    const bool overlap =
        opt_.fsdp_overlap == "on" || (opt_.fsdp_overlap == "auto" && model_->placement.device.is_cuda());
    fsdp_ = std::make_shared<FsdpRunner>(*model_, comm_, opt_.full, std::move(adapters), checkpoint.get(),
                                         ep ? expert_replicas_ : nullptr, overlap);
    model_->layer_runner = fsdp_;
    if (opt_.full) {  // nothing replicated: every trainable tensor is a shard
      trainable_ = fsdp_->shards();
      trainable_names_.assign(trainable_.size(), "");
      placement_.assign(trainable_.size(), Placement{});
    }
  } else if (opt_.activation_checkpointing) {
    std::vector<std::vector<at::Tensor>> per_layer;
    for (int64_t l = 0; l < model_->config.num_hidden_layers; ++l)
      per_layer.push_back(layer_trainable_tensors(*model_, l, opt_.full ? std::vector<at::Tensor>{}
                                                                          : lora_.layer_parameters(l)));
    model_->layer_runner = std::make_shared<CheckpointRunner>(std::move(per_layer));
  }
  if (checkpoint) checkpoint->check_unchanged();  // the shard loader has read its spans
  if (checkpoint && W > 1) report_.push_back(sharded_load_line(*comm_, *checkpoint));
  if (opt_.tenants.empty() && !service)  // tenants have their own
    optimizer_ = std::make_unique<AdamW>(trainable_, AdamWOptions{opt_.adam.beta1, opt_.adam.beta2,
                                                                  opt_.adam.eps, opt_.weight_decay});
  schedule_.peak_lr = opt_.lr;
  schedule_.total_steps = opt_.steps;
  schedule_.warmup_steps = opt_.warmup_steps >= 0 ? opt_.warmup_steps : opt_.steps / 20;
  schedule_.min_lr_ratio = opt_.min_lr_ratio;
  // Dropout draws from the default generators: seeded per rank, saved in checkpoints.
  at::manual_seed(opt_.seed * 1000003 + uint64_t(comm_->rank()));
  if (!opt_.resume.empty()) resume(opt_.resume);
  if (service) micro_batch_size_ = opt_.micro_batch_size;  // 0: a rank's whole share at once
  else plan_memory();
}

Trainer::~Trainer() = default;

std::vector<Batch> Trainer::next_micro_batches() {
  if (bank_) return next_tenant_batches();
  // Every rank draws the same global batch and keeps its contiguous share, so the split
  // does not change which samples a step sees.
  std::vector<size_t> idx = data_->sampler->next(opt_.batch_size);
  const int64_t share = opt_.batch_size / comm_->size();
  std::vector<const Sample*> picked;
  for (int64_t i = comm_->rank() * share; i < (comm_->rank() + 1) * share; ++i)
    picked.push_back(&samples_[idx[i]]);
  // Several micro-batches without packing: samples of like length share one, so each is
  // padded less. The step's loss is a sum over its samples: the order does not change it.
  if (!data_->collate.pack && micro_batch_size_ < int64_t(picked.size()))
    std::stable_sort(picked.begin(), picked.end(), [](const Sample* a, const Sample* b) {
      return a->input_ids.size() > b->input_ids.size();
    });
  return collate(picked, data_->collate, micro_batch_size_);
}

StepStats Trainer::step(const std::vector<Batch>& micro_batches) {
  if (bank_) return step_tenants(micro_batches);
  auto t0 = std::chrono::steady_clock::now();
  StepStats st;
  for (const auto& b : micro_batches) {
    st.label_tokens += b.label_tokens;
    st.tokens += b.segment_ids.ge(0).sum().item<int64_t>();
  }
  // Global counts: the loss of the step is normalized by the label tokens of all ranks.
  at::Tensor counts = at::tensor({double(st.label_tokens), double(st.tokens), double(micro_batches.size())},
                                 at::kDouble);
  comm_->all_reduce_sum(counts);
  st.label_tokens = int64_t(counts[0].item<double>());
  st.tokens = int64_t(counts[1].item<double>());
  const double total_micro = counts[2].item<double>();
  GLINT_CHECK(st.label_tokens > 0, "step ", step_ + 1, ": the batch has no label tokens to train on");
  optimizer_->zero_grad();
  double ce_total = 0, aux_total = 0;
  bool has_aux = false;
  at::Tensor expert_tokens;  // [L_moe, E] this rank's routed copies
  const double coef = model_->config.router_aux_loss_coef;
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  if (fsdp_) fsdp_->begin_root();
  for (const auto& b : micro_batches) {
    auto tf = clock::now();
    LossParts parts = causal_lm_loss(*model_, b.input_ids, b.labels, b.position_ids, b.segment_ids);
    // Normalize by the label tokens of the whole step, so accumulation equals one big batch.
    at::Tensor objective = parts.ce_sum / double(st.label_tokens);
    if (parts.aux_loss.defined()) {
      objective = objective + parts.aux_loss * (coef / total_micro);
      aux_total += parts.aux_loss.item<double>();
      has_aux = true;
    }
    ce_total += parts.ce_sum.item<double>();
    if (parts.expert_tokens.defined())
      expert_tokens = expert_tokens.defined() ? expert_tokens + parts.expert_tokens : parts.expert_tokens;
    auto tb = clock::now();
    st.forward_seconds += std::chrono::duration<double>(tb - tf).count();
    objective.backward();
    st.backward_seconds += seconds_since(tb);
  }
  if (fsdp_) fsdp_->end_root();
  auto to = clock::now();
  all_reduce_grads();
  at::Tensor sums = at::tensor({ce_total, aux_total}, at::kDouble);
  comm_->all_reduce_sum(sums);
  st.loss = sums[0].item<double>() / double(st.label_tokens);
  if (has_aux) st.aux_loss = sums[1].item<double>() / total_micro;
  if (expert_tokens.defined()) {
    at::Tensor load = expert_tokens.to(at::kDouble).contiguous();
    comm_->all_reduce_sum(load);
    st.idle_experts = load.eq(0).sum().item<int64_t>();
    st.expert_load_max = (std::get<0>(load.max(1)) / load.mean(1)).max().item<double>();
    // The same global load on every rank: every copy of the biases moves alike.
    if (opt_.router_bias_update_rate > 0) update_router_biases(*model_, load, opt_.router_bias_update_rate);
  }
  if (!opt_.dump_gradients.empty()) dump_gradients(step_ + 1);
  st.grad_norm = clip_gradients(trainable_, placement_);
  ++step_;
  st.lr = schedule_.at(step_);
  optimizer_->step(st.lr);
  st.optimizer_seconds = seconds_since(to);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

void Trainer::all_reduce_grads() { all_reduce_grads(trainable_, placement_); }

void Trainer::all_reduce_grads(std::vector<at::Tensor>& trainable, const std::vector<Placement>& placement) {
  // One flat buffer per (replica group, dtype): one collective per group per step. The
  // buckets go in the order of their first tensor, the same on every rank (never in the
  // order of the groups' addresses, which differ between processes: ranks would then
  // enter different collectives and wait on each other forever).
  std::vector<std::pair<std::pair<Comm*, at::ScalarType>, std::vector<at::Tensor*>>> buckets;
  for (size_t i = 0; i < trainable.size(); ++i) {
    at::Tensor& p = trainable[i];
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    Comm* group = placement[i].replicas;
    if (!group || group->size() <= 1) continue;  // shards are reduced
    std::pair<Comm*, at::ScalarType> key{group, p.scalar_type()};
    auto it = std::find_if(buckets.begin(), buckets.end(), [&](const auto& b) { return b.first == key; });
    if (it == buckets.end()) it = buckets.insert(buckets.end(), {key, {}});
    it->second.push_back(&p);
  }
  for (auto& [key, params] : buckets) {
    std::vector<at::Tensor> flat;
    for (at::Tensor* p : params) flat.push_back(p->grad().reshape({-1}));
    at::Tensor buf = at::cat(flat);
    key.first->all_reduce_sum(buf);
    int64_t off = 0;
    for (at::Tensor* p : params) {
      int64_t n = p->numel();
      p->grad().copy_(buf.narrow(0, off, n).view(p->sizes()));
      off += n;
    }
  }
}

uint64_t Trainer::bytes_sent() const {
  // A mesh axis spanning the whole world is the world communicator itself: count it once.
  std::set<const Comm*> comms{comm_.get(), ep_comm_.get(), expert_replicas_.get()};
  uint64_t n = 0;
  for (const Comm* c : comms)
    if (c) n += c->total_bytes_sent();
  return n;
}

at::Tensor Trainer::all_experts(const at::Tensor& local) {
  return ep_comm_ ? ep_comm_->all_gather(local.contiguous()) : local;
}

int64_t Trainer::local_weight_bytes() const {
  auto bytes = [](const at::Tensor& t) { return int64_t(t.numel()) * int64_t(t.element_size()); };
  int64_t n = 0;
  for (const auto& p : model_->parameters()) n += bytes(p);  // sharded layers hold 0 elements
  if (fsdp_)
    for (const auto& s : fsdp_->shards()) n += bytes(s);
  if (!opt_.full)
    for (const auto& site : lora_.sites) n += bytes(site.A()) + bytes(site.B());
  if (optimizer_) n += optimizer_->state_bytes();
  if (bank_) n += tenant_weight_bytes();
  return n;
}

void Trainer::dump_gradients(int64_t step) {
  // Full gradients under the trainable tensors' names; shards are gathered (collective:
  // every rank takes part).
  std::vector<std::pair<std::string, at::Tensor>> named;
  if (opt_.full && fsdp_) {
    std::vector<at::Tensor> grads;
    for (const auto& s : fsdp_->shards())
      grads.push_back(s.grad().defined() ? s.grad() : at::zeros_like(s));
    named = fsdp_->gather_named(grads);
  } else {
    for (size_t i = 0; i < trainable_.size(); ++i) {
      const at::Tensor& g = trainable_[i].grad();
      named.emplace_back(trainable_names_[i], g.defined() ? g : at::zeros_like(trainable_[i]));
    }
  }
  write_gradients(opt_.dump_gradients, step, std::move(named));
}

void Trainer::write_gradients(const std::string& dir, int64_t step,
                              std::vector<std::pair<std::string, at::Tensor>> named) {
  for (auto& [name, t] : named)
    if (expert_tensor_names_.count(name)) t = all_experts(t);
  if (comm_->rank() != 0) return;
  make_dirs(dir);
  write_safetensors(dir + "/step_" + std::to_string(step) + ".safetensors", named);
}

double Trainer::clip_gradients(const std::vector<at::Tensor>& params, const std::vector<Placement>& placement) {
  return clip_gradients(params, placement, opt_.max_grad_norm);
}

double Trainer::clip_gradients(const std::vector<at::Tensor>& params, const std::vector<Placement>& placement,
                               double max_norm) {
  // One rule for every placement: sum of squares over the tensors this rank holds, each
  // divided by how many ranks hold an identical copy, summed over the world.
  at::NoGradGuard no_grad;
  double local = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& g = params[i].grad();
    if (!g.defined()) continue;
    local += g.to(at::kDouble).pow(2).sum().item<double>() / placement[i].copies;
  }
  at::Tensor total = at::tensor({local}, at::kDouble);
  comm_->all_reduce_sum(total);
  double norm = std::sqrt(total.item<double>());
  if (max_norm > 0 && norm > max_norm) {
    double coef = max_norm / (norm + 1e-6);
    for (const auto& p : params)
      if (p.grad().defined()) p.grad().mul_(coef);
  }
  return norm;
}

double Trainer::evaluate_exact_match(int64_t count, uint64_t seed) {
  ReverseDigitsTask task;
  std::vector<Sample> held_out = task.generate(count, seed);
  std::vector<std::vector<int64_t>> prompts;
  for (const auto& s : held_out) prompts.push_back(ReverseDigitsTask::prompt_of(s));
  if (fsdp_) fsdp_->gather(fsdp_->root_unit());
  lora_.train(false);  // no dropout while evaluating
  std::vector<GenerationRequest> requests(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests[i].prompt = prompts[i];
    requests[i].sampling.max_new_tokens = task.max_digits + 1;
    requests[i].sampling.stop_token_ids = {ReverseDigitsTask::kEos};
  }
  std::vector<std::vector<int64_t>> generated;
  for (GenerationResult& r : generate(*model_, requests)) generated.push_back(std::move(r.tokens));
  if (fsdp_) fsdp_->release(fsdp_->root_unit());
  lora_.train(true);
  int64_t correct = 0;
  for (size_t i = 0; i < held_out.size(); ++i)
    correct += generated[i] == ReverseDigitsTask::answer_of(held_out[i]);
  return double(correct) / double(count);
}

}  // namespace glint
