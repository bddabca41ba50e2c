// glint init-model: a randomly initialised model in Hugging Face format, in the dtype its
// config declares (torch_dtype, or v5's dtype) unless --dtype names another. The config.json
// written keeps the fields glint reads, the special token ids among them.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/family.h"
#include "model/weights.h"

namespace glint::cli {

Action add_init_model(CLI::App& app) {
  struct Args {
    std::string config, tiny, output, dtype;  // dtype "": the config's
    uint64_t seed = 0;
    int64_t vocab_size = 256;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = add_command(app, "init-model");
  CLI::Option* config = cmd->add_option("--config", a->config, "config.json describing the model");
  CLI::Option* tiny = cmd->add_option("--tiny", a->tiny,
                                      "instead of --config: a family's tiny model, a few small layers of every kind "
                                      "the family has (the registry tests' shape): the family's folder name, e.g. qwen3");
  config->excludes(tiny);
  cmd->add_option("--vocab-size", a->vocab_size, "with --tiny: its vocabulary")->capture_default_str()->needs(tiny);
  cmd->add_option("--output", a->output, "output directory")->required();
  cmd->add_option("--seed", a->seed, "random seed")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "float32, bfloat16 or float16 (default: the config's torch_dtype or dtype, "
                                       "else float32)");
  return [a]() {
    GLINT_USAGE_CHECK(!a->config.empty() || !a->tiny.empty(), "init-model: give --config FILE or --tiny FAMILY");
    GLINT_USAGE_CHECK(a->vocab_size >= 2, "init-model: --vocab-size ", a->vocab_size, " is below 2");
    ModelConfig config = a->tiny.empty() ? ModelConfig::from_file(a->config) : family_named(a->tiny).tiny(a->vocab_size);
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
