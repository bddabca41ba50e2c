// glint export: what a training checkpoint trained, as a finished run leaves it: a PEFT
// adapter, each tenant's adapter, or the whole model (export/from_checkpoint.h).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "export/from_checkpoint.h"

namespace glint::cli {

Action add_export(CLI::App& app) {
  struct Args {
    std::string checkpoint, output, tenant;
    bool overwrite = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = add_command(app, "export");
  cmd->footer(
      "CHECKPOINT is a run directory (its newest checkpoint) or one of its checkpoints/step-N, saved on any\n"
      "mesh. A LoRA run's adapter is written as the run's OUT/adapter is (adapter_config.json,\n"
      "adapter_model.safetensors), for glint generate/merge --adapter, PEFT and vLLM; a tenant run's as\n"
      "OUT/<tenant>/ for each tenant (or --tenant's alone, into OUT); a --full run's as a model directory\n"
      "with the base model's tokenizer files. glint generate and glint merge also take a checkpoint as\n"
      "--adapter directly.");
  cmd->add_option("checkpoint", a->checkpoint, "run directory or checkpoint directory (RUN/checkpoints/step-N)")
      ->required();
  cmd->add_option("--output", a->output, "directory to write; an existing non-empty one is refused without "
                                         "--overwrite")->required();
  cmd->add_option("--tenant", a->tenant, "a multi-tenant run's tenant to export alone");
  cmd->add_flag("--overwrite", a->overwrite, "replace an existing non-empty --output (once the export is complete)");
  return [a]() {
    const ExportReport r = export_checkpoint(a->checkpoint, a->output, a->tenant, a->overwrite);
    const char* what = r.kind == "full" ? "model" : r.dirs.size() == 1 ? "adapter" : "adapters";
    std::cerr << "exported the " << what << " of step " << r.step << " to";
    for (const auto& d : r.dirs) std::cerr << " " << d;
    std::cerr << "\n";
    return 0;
  };
}

}  // namespace glint::cli
