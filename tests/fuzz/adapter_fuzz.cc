// A PEFT adapter directory: adapter_config.json, adapter_model.safetensors and perhaps
// router_biases.safetensors, loaded by load_adapter onto a tiny DeepSeek-V3 model
// (linear and packed-expert sites, router correction biases). The input holds the
// files in that order, separated by kSeparator; a missing part is a missing file.
//
// GLINT_FUZZ_WRITE_SEEDS=DIR: writes seed inputs (adapters glint saved) into DIR and exits.
#include <ATen/ATen.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "io/safetensors.h"
#include "lora/lora.h"
#include "lora/peft_io.h"
#include "model/causal_lm.h"
#include "model/family.h"

namespace {

constexpr std::string_view kSeparator = "\n#glint-fuzz-next-file#\n";

glint::CausalLMImpl& model() {
  static glint::CausalLM m = [] {
    glint::CausalLM built(glint::family_for("deepseek_v3", "fuzz").tiny(64), glint::TensorPlacement{});
    glint::init_weights(*built, 1);
    return built;
  }();
  return *m;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_seeds(const std::string& out) {
  std::filesystem::create_directories(out);
  struct Variant {
    const char* name;
    const char* targets;
    int64_t r;
    bool rslora, biases;
  };
  for (const Variant& v : {Variant{"seed-all", "all", 2, false, true}, Variant{"seed-linear", "q_a_proj,o_proj", 1, true, false},
                           Variant{"seed-experts", "experts.down_proj", 3, false, false}}) {
    glint::LoraOptions o;
    o.r = v.r;
    o.use_rslora = v.rslora;
    glint::LoraOptions::parse_targets(v.targets, "seed", &o);
    glint::LoraModel lora = glint::apply_lora(model(), o, 7);
    const std::string dir = glint::fuzz::scratch_dir() + "/seed";
    std::filesystem::create_directories(dir);
    glint::save_adapter(dir, lora, "base");
    lora.detach_from(model());
    std::string input = slurp(dir + "/adapter_config.json");
    input += kSeparator;
    input += slurp(dir + "/adapter_model.safetensors");
    if (v.biases) {
      glint::write_safetensors(dir + "/b.safetensors", glint::router_biases(model()));
      input += kSeparator;
      input += slurp(dir + "/b.safetensors");
    }
    std::ofstream(out + "/" + v.name, std::ios::binary) << input;
  }
}

void place(const std::string& dir, const char* name, std::string_view part, bool present) {
  const std::string path = dir + "/" + name;
  if (present) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(part.data(), std::streamsize(part.size()));
  } else {
    std::filesystem::remove(path);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  if (const char* out = std::getenv("GLINT_FUZZ_WRITE_SEEDS")) {
    write_seeds(out);
    std::exit(0);
  }
  (void)model();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto [config, files] = glint::fuzz::split(input, kSeparator);
  const auto [weights, biases] = glint::fuzz::split(files, kSeparator);
  const std::string dir = glint::fuzz::scratch_dir() + "/adapter";
  std::filesystem::create_directories(dir);
  place(dir, "adapter_config.json", config, true);
  place(dir, "adapter_model.safetensors", weights, files.data() != nullptr);
  place(dir, glint::kRouterBiasesFile, biases, biases.data() != nullptr);
  glint::CausalLMImpl& m = model();
  std::vector<at::Tensor> before;
  for (auto& [name, b] : glint::router_biases(m)) before.push_back(b.clone());
  std::vector<bool> trainable;
  for (const auto& p : m.parameters()) trainable.push_back(p.requires_grad());
  try {
    glint::LoraModel lora = glint::load_adapter(dir, m);
    lora.detach_from(m);
  } catch (const glint::Error&) {
    // A refused adapter leaves the model as it was: no adapters, the same router biases.
    glint::fuzz::check(!glint::has_adapters(m), "a refused adapter leaves no adapters attached");
    size_t k = 0;
    for (const auto& p : m.parameters())
      glint::fuzz::check(p.requires_grad() == trainable[k++], "a refused adapter leaves the model unfrozen");
    size_t i = 0;
    for (auto& [name, b] : glint::router_biases(m))
      glint::fuzz::check(at::equal(b, before[i++]), "a refused adapter leaves the router biases");
    return 0;
  }
  // Loaded: put the base model's biases back for the next input.
  size_t i = 0;
  at::NoGradGuard no_grad;
  for (auto& [name, b] : glint::router_biases(m)) b.copy_(before[i++]);
  return 0;
}
