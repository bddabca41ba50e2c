#include "model/family.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "model/deepseek_v3/family.h"
#include "model/deepseek_v4/family.h"
#include "model/glm4_moe/family.h"
#include "model/gpt_oss/family.h"
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
      &glm4_moe_family(),
      &gpt_oss_family(),
  };
  return families;
}

bool beyond_last_layer(const std::string& key, const std::string& prefix, int64_t num_hidden_layers) {
  if (key.compare(0, prefix.size(), prefix) != 0) return false;
  const size_t end = key.find('.', prefix.size());
  const std::string digits = key.substr(prefix.size(), end == std::string::npos ? std::string::npos : end - prefix.size());
  if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return false;
  return std::stoll(digits) >= num_hidden_layers;
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

const ModelFamily& family_named(const std::string& name) {
  std::string known;
  for (const ModelFamily* f : model_families()) {
    if (f->name() == name) return *f;
    known += (known.empty() ? "" : ", ") + f->name();
  }
  usage_fail("no model family is named '", name, "' (families: ", known, ")");
}

}  // namespace glint
