#include "train/train_options.h"

#include <ATen/Context.h>

#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "data/text_dataset.h"
#include "tokenizer/tokenizer.h"
#include "train/memory_estimate.h"

namespace glint {

void TrainOptions::validate() const {
  GLINT_USAGE_CHECK(optim.steps >= 0, "--steps must be positive (or 0: from --epochs), got ", optim.steps);
  GLINT_USAGE_CHECK(std::isfinite(optim.epochs) && optim.epochs >= 0, "--epochs must be positive, got ", optim.epochs);
  GLINT_USAGE_CHECK(optim.steps > 0 || optim.epochs > 0, "--steps 0 counts the steps from --epochs, which is not set");
  GLINT_USAGE_CHECK(optim.steps > 0 || service.slots > 0 || !data.path.empty() || !tenants.empty(),
                    "--epochs needs --data (the built-in task is endless: give --steps)");
  GLINT_USAGE_CHECK(optim.batch_size > 0, "--batch-size must be positive, got ", optim.batch_size);
  GLINT_USAGE_CHECK(memory.micro_batch_size >= 0, "--micro-batch-size must be >= 0, got ", memory.micro_batch_size);
  GLINT_USAGE_CHECK(parallel.fsdp_overlap == "auto" || parallel.fsdp_overlap == "on" || parallel.fsdp_overlap == "off",
                    "--fsdp-overlap must be auto, on or off, got '", parallel.fsdp_overlap, "'");
  if (memory.micro_batch_size > 0)
    GLINT_USAGE_CHECK(optim.batch_size % memory.micro_batch_size == 0, "--batch-size (", optim.batch_size,
                ") must be a multiple of --micro-batch-size (", memory.micro_batch_size, ")");
  GLINT_USAGE_CHECK(data.seq_len >= 0 && data.seq_len != 1, "--seq-len must be >= 2, got ", data.seq_len);
  GLINT_USAGE_CHECK(optim.lr > 0 && std::isfinite(optim.lr), "--lr must be positive, got ", optim.lr);
  GLINT_USAGE_CHECK(optim.min_lr_ratio >= 0 && optim.min_lr_ratio <= 1, "--min-lr-ratio must be in [0, 1], got ",
              optim.min_lr_ratio);
  GLINT_USAGE_CHECK(optim.max_grad_norm >= 0, "--max-grad-norm must be >= 0, got ", optim.max_grad_norm);
  GLINT_USAGE_CHECK(optim.adam.weight_decay >= 0, "--weight-decay must be >= 0, got ", optim.adam.weight_decay);
  GLINT_USAGE_CHECK(model.threads >= 0, "--threads must be >= 0, got ", model.threads);
  GLINT_USAGE_CHECK(run.log_every > 0, "--log-every must be positive, got ", run.log_every);
  GLINT_USAGE_CHECK(data.max_bad_lines >= 0, "--max-bad-lines must be >= 0, got ", data.max_bad_lines);
  if (!data.chat_date.empty()) chat_date_clock(data.chat_date);  // throws naming --chat-date
  GLINT_USAGE_CHECK(tenants.empty() || !full, "--tenant trains LoRA adapters; it does not go with --full");
  GLINT_USAGE_CHECK(service.slots == 0 || (tenants.empty() && data.path.empty() && !full && run.resume.empty()),
                    "service mode trains the tenants it is sent: no --data, --tenant, --full or --resume");
  GLINT_USAGE_CHECK(service.slots == 0 || service.r_max > 0, "--max-rank must be positive, got ", service.r_max);
  GLINT_USAGE_CHECK(tenants.empty() || data.path.empty(), "--data and --tenant do not go together: each tenant names its own data");
  GLINT_USAGE_CHECK(std::isfinite(optim.router_aux_loss_coef), "--router-aux-loss-coef must be a number, got ",
                    optim.router_aux_loss_coef);
  GLINT_USAGE_CHECK(std::isfinite(optim.router_bias_update_rate) && optim.router_bias_update_rate >= 0,
                    "--router-bias-update-rate must be >= 0, got ", optim.router_bias_update_rate);
  GLINT_USAGE_CHECK(tenants.empty() || optim.router_bias_update_rate == 0,
                    "--router-bias-update-rate does not go with --tenant: the tenants share the base model's routers");
  GLINT_USAGE_CHECK(tenants.empty() || optim.router_aux_loss_coef <= 0,
                    "--router-aux-loss-coef does not go with --tenant: the load-balancing loss is a statistic of "
                    "the whole batch and would couple the tenants");
  GLINT_USAGE_CHECK(tenants.empty() || lora.dropout == 0,
                    "--lora-dropout does not go with --tenant (tenant adapters train without dropout)");
  GLINT_USAGE_CHECK(full || lora.r > 0, "--lora-r must be positive, got ", lora.r);
  GLINT_USAGE_CHECK(full || (std::isfinite(lora.alpha) && lora.alpha > 0), "--lora-alpha must be positive, got ",
                    lora.alpha);
  GLINT_USAGE_CHECK(lora.dropout >= 0 && lora.dropout < 1, "--lora-dropout must be in [0, 1), got ", lora.dropout);
  GLINT_USAGE_CHECK(parallel.ep >= 1, "--ep must be at least 1, got ", parallel.ep);
  auto data_file = [](const std::string& path, const char* flag) {
    GLINT_USAGE_CHECK(path.empty() || path_exists(path), flag, " ", path, ": no such file");
    GLINT_USAGE_CHECK(path.empty() || !is_directory(path), flag, " ", path,
                      " is a directory; it takes one JSONL file (one JSON object per line)");
  };
  data_file(data.path, "--data");
  data_file(data.eval_path, "--eval-data");
  GLINT_USAGE_CHECK(run.eval_every >= 0, "--eval-every must be >= 0, got ", run.eval_every);
  GLINT_USAGE_CHECK(data.eval_batches >= 0, "--eval-batches must be >= 0, got ", data.eval_batches);
  GLINT_USAGE_CHECK(run.save_every >= 0, "--save-every must be >= 0, got ", run.save_every);
  GLINT_USAGE_CHECK(run.stop_after >= 0, "--stop-after must be >= 0, got ", run.stop_after);
  GLINT_USAGE_CHECK(run.keep_last >= 0, "--keep-last must be a count of checkpoints or all, got ", run.keep_last);
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
  GLINT_USAGE_CHECK(model.dir.empty() || path_exists(model.dir + "/config.json"), "--model ", model.dir,
                    ": no config.json (is this a Hugging Face model directory?)");
  GLINT_USAGE_CHECK(data.tokenizer.empty() || Tokenizer::found_in(data.tokenizer), "--tokenizer ", data.tokenizer,
                    ": no tokenizer.json (or tiktoken.model)");
  if (!memory.budget.empty()) parse_memory_size(memory.budget, "--memory-budget");
  if (model.dtype != "auto") {
    c10::ScalarType dt;
    try {
      dt = parse_dtype(model.dtype, "--dtype");
    } catch (const Error& e) {
      usage_fail(e.what());
    }
    GLINT_USAGE_CHECK(dt != at::kHalf,
                      "--dtype float16 is not supported for training: its narrow range needs loss scaling to keep "
                      "small gradients from vanishing, which glint does not do; use --dtype bfloat16 (same speed on "
                      "every GPU that has float16 tensor cores since Ampere, and float32's range) or float32");
  }
  GLINT_USAGE_CHECK(model.device == "auto" || model.device == "cpu" || model.device.rfind("cuda", 0) == 0, "--device: unknown device '",
                    model.device, "' (expected auto, cpu, cuda or cuda:N)");
  GLINT_USAGE_CHECK(model.device.rfind("cuda", 0) != 0 || at::hasCUDA(), "--device ", model.device,
                    ": this build of glint has no CUDA, or no GPU is present (glint --version names the libtorch it "
                    "was built against; scripts/build.sh takes a CUDA PyTorch's when python3 can import one)");
  optim.adam.validate("AdamW options");
  if (!full) lora.validate("LoRA options");
}

}  // namespace glint
