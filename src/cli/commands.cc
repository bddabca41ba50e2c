#include "cli/commands.h"

#include <CLI/CLI.hpp>

#include "core/error.h"

namespace glint::cli {

const std::vector<CommandSummary>& command_summaries() {
  static const std::vector<CommandSummary> kCommands = {
      {"train", "fine-tune a model (LoRA by default)"},
      {"init-model", "write a random model (config.json + safetensors)"},
      {"merge", "fold a LoRA adapter (expert LoRA included) into its base model and write a Hugging Face checkpoint"},
      {"export",
       "write a training checkpoint as a PEFT adapter (or each tenant's, or the whole model of a --full run)"},
      {"bench", "benchmarks (each prints one JSON object)"},
      {"launch", "run N ranks of a command on this machine, one of --nnodes machines (torchrun-style)"},
      {"data", "inspect training data"},
      {"template", "render chat conversations (JSON lines on stdin) with a tokenizer's chat template"},
      {"tokenize", "encode JSON strings (one per line on stdin) to JSON arrays of token ids; --decode reverses"},
      {"generate", "generate text (or token ids) from a model, optionally with a LoRA adapter, printed as it comes"},
      {"serve", "serve the Tinker training API: many users' LoRA adapters trained in shared steps on one base model"},
      {"plot",
       "draw a training run as OUT/report.html: one self-contained page (inline SVG, no script, no network) with "
       "the loss and evaluation loss, learning rate, gradient norm and tokens/s against the step; for a "
       "multi-tenant run, every tenant's loss, learning rate and gradient norm, named, against its own step"},
  };
  return kCommands;
}

const char* command_summary(const std::string& name) {
  for (const CommandSummary& c : command_summaries())
    if (name == c.name) return c.summary;
  GLINT_ASSERT(false, "glint has no subcommand '", name, "' in command_summaries()");
  return "";
}

CLI::App* add_command(CLI::App& app, const std::string& name) {
  return app.add_subcommand(name, command_summary(name));
}

}  // namespace glint::cli
