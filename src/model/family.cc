#include "model/family.h"

#include "core/error.h"
#include "model/deepseek_v3/family.h"
#include "model/deepseek_v4/family.h"
#include "model/qwen3/family.h"
#include "model/qwen3_5/family.h"
#include "model/qwen3_next/family.h"

namespace glint {

const std::vector<const ModelFamily*>& model_families() {
  // The registry: one line per family.
  static const std::vector<const ModelFamily*> families = {
      &qwen3_family(),
      &deepseek_v3_family(),
      &qwen3_5_family(),
      &deepseek_v4_family(),
      &qwen3_next_family(),
  };
  return families;
}

const ModelFamily& family_for(const std::string& model_type, const std::string& where) {
  std::string known;
  for (const ModelFamily* f : model_families())
    for (const std::string& t : f->model_types()) {
      if (t == model_type) return *f;
      known += (known.empty() ? "" : ", ") + t;
    }
  fail(where, ": model_type '", model_type, "' is not supported (known: ", known, ")");
}

}  // namespace glint
