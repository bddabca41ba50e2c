// glint merge: fold a LoRA adapter into its base model and write a Hugging Face checkpoint.
#include <CLI/CLI.hpp>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "export/merge.h"
#include "train/memory_estimate.h"

namespace glint::cli {

namespace {

std::string megabytes(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  return buf;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

}  // namespace

Action add_merge(CLI::App& app) {
  struct Args {
    MergeOptions o;
    std::string max_shard_size = "5G";
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = add_command(app, "merge");
  cmd->footer(
      "Writes W + scale*B*A for every adapted linear and every expert of an adapted expert tensor, in the\n"
      "family's Hub form (per-expert keys for Qwen3-MoE, Qwen3-Next, DeepSeek-V3), sharded with\n"
      "model.safetensors.index.json, plus the base's config.json and tokenizer/generation files. Router\n"
      "biases saved beside the adapter (router_biases.safetensors) replace the base's. An FP8/FP4-quantised\n"
      "base (DeepSeek V3/V4 releases) is written dequantised in bfloat16, without quantization_config.\n"
      "Streams tensor by tensor: memory stays near one tensor piece, never the whole model. The output is\n"
      "staged beside --output and renamed into place when complete; on error nothing is left there.");
  cmd->add_option("--model", a->o.model_dir, "base model: a Hugging Face model directory")->required();
  cmd->add_option("--adapter", a->o.adapter_dir,
                  "PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors): a run's "
                  "RUN/adapter, a multi-tenant run's RUN/<tenant>/adapter; or a run's checkpoint: RUN (its newest) "
                  "or RUN/checkpoints/step-N")
      ->required();
  cmd->add_option("--tenant", a->o.tenant, "with a multi-tenant run's checkpoint as --adapter: whose adapter");
  cmd->add_option("--output", a->o.output,
                  "directory for the merged model; an existing non-empty one is refused without --overwrite")
      ->required();
  cmd->add_option("--dtype", a->o.dtype,
                  "dtype of the written weights: keep (each tensor as the base stored it; quantised ones in "
                  "bfloat16), float32, bfloat16 or float16 (integer tables are always kept)")
      ->capture_default_str();
  cmd->add_option("--max-shard-size", a->max_shard_size,
                  "largest shard file, e.g. 5G, 500M or 64K (binary units; a bare number is MiB); a single "
                  "model.safetensors when everything fits")
      ->capture_default_str();
  cmd->add_flag("--overwrite", a->o.overwrite,
                "replace an existing non-empty --output (only after the new model is complete)");
  return [a]() {
    a->o.max_shard_bytes = uint64_t(parse_memory_size(a->max_shard_size, "--max-shard-size") * 1024.0 * 1024.0);
    const auto start = std::chrono::steady_clock::now();
    const MergeReport r = merge_adapter(a->o);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    struct rusage usage {};
    ::getrusage(RUSAGE_SELF, &usage);
    std::cout << "merged " << a->o.adapter_dir << " into " << a->o.model_dir << " -> " << a->o.output << "\n"
              << "  tensors written " << r.tensors << " (adapted " << r.adapted << ")  files " << r.files
              << "  size " << megabytes(double(r.bytes)) << "  time " << seconds_text(seconds) << "  peak RSS "
              << megabytes(double(usage.ru_maxrss) * 1024.0) << "\n";
    if (r.router_biases) std::cout << "  router correction biases: the adapter's (router_biases.safetensors)\n";
    if (r.dequantised)
      std::cout << "  the base was FP8/FP4-quantised: weights written dequantised in bfloat16, quantization_config "
                   "removed from config.json\n";
    if (!r.config_note.empty()) std::cout << "  " << r.config_note << "\n";
    return 0;
  };
}

}  // namespace glint::cli
