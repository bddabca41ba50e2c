// glint init-model: a randomly initialised model in Hugging Face format.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "core/dtype.h"
#include "model/weights.h"

namespace glint::cli {

Action add_init_model(CLI::App& app) {
  struct Args {
    std::string config, output, dtype = "float32";
    uint64_t seed = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = add_command(app, "init-model");
  cmd->add_option("--config", a->config, "config.json describing the model")->required();
  cmd->add_option("--output", a->output, "output directory")->required();
  cmd->add_option("--seed", a->seed, "random seed")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "float32, bfloat16 or float16")->capture_default_str();
  return [a]() {
    ModelConfig config = ModelConfig::from_file(a->config);
    CausalLM model(config, TensorPlacement{parse_dtype(a->dtype, "--dtype"), c10::Device(c10::kCPU)});
    init_weights(*model, a->seed);
    save_pretrained(*model, a->output);
    int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    std::cerr << "wrote " << config.model_type << " with " << n << " parameters to " << a->output << "\n";
    return 0;
  };
}

}  // namespace glint::cli
