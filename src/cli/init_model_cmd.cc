// glint init-model: a randomly initialised model in Hugging Face format, in the dtype its
// config declares (torch_dtype, or v5's dtype) unless --dtype names another. The config.json
// written keeps the fields glint reads, the special token ids among them.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "core/dtype.h"
#include "model/weights.h"

namespace glint::cli {

Action add_init_model(CLI::App& app) {
  struct Args {
    std::string config, output, dtype;  // dtype "": the config's
    uint64_t seed = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = add_command(app, "init-model");
  cmd->add_option("--config", a->config, "config.json describing the model")->required();
  cmd->add_option("--output", a->output, "output directory")->required();
  cmd->add_option("--seed", a->seed, "random seed")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "float32, bfloat16 or float16 (default: the config's torch_dtype or dtype, "
                                       "else float32)");
  return [a]() {
    ModelConfig config = ModelConfig::from_file(a->config);
    const c10::ScalarType dtype = a->dtype.empty()
                                      ? parse_dtype(config.torch_dtype, a->config + " torch_dtype (give --dtype to "
                                                                                    "choose another)")
                                      : parse_dtype(a->dtype, "--dtype");
    CausalLM model(config, TensorPlacement{dtype, c10::Device(c10::kCPU)});
    init_weights(*model, a->seed);
    save_pretrained(*model, a->output);
    int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    std::cerr << "wrote " << config.model_type << " with " << n << " parameters (" << dtype_name(dtype) << ") to "
              << a->output << "\n";
    return 0;
  };
}

}  // namespace glint::cli
