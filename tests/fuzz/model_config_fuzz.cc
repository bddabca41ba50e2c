// config.json of every family: ModelConfig::from_file (the model_type picks the family,
// whose mapping reads and validates the fields). A config that loads must survive the
// trip through to_json, the config.json glint writes beside a trained model.
//
// GLINT_FUZZ_WRITE_SEEDS=DIR: writes each registered family's tiny config.json into DIR
// and exits.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "model/config.h"
#include "model/family.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* out = std::getenv("GLINT_FUZZ_WRITE_SEEDS")) {
    std::filesystem::create_directories(out);
    for (const glint::ModelFamily* f : glint::model_families())
      std::ofstream(std::string(out) + "/seed-" + f->name() + ".json") << f->to_json(f->tiny(64)).dump(2);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      glint::fuzz::write_scratch("config.json", std::string_view(reinterpret_cast<const char*>(data), size));
  glint::ModelConfig c;
  try {
    c = glint::ModelConfig::from_file(path);
  } catch (const glint::Error&) {
    return 0;
  }
  const int64_t layers = std::min<int64_t>(c.num_hidden_layers, 4096);
  for (int64_t l = 0; l < layers; ++l) (void)c.is_moe_layer(l);
  // Outside the try: a config glint accepted and wrote must read back the same.
  const nlohmann::json written = c.to_json();
  const glint::ModelConfig back = glint::ModelConfig::from_json(written, "config.json as glint writes it");
  glint::fuzz::check(back.to_json() == written, "from_json(to_json(c)) is c");
  return 0;
}
