#include "generate/generation_defaults.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "core/fs.h"
#include "model/config.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace glint {

namespace {

using nlohmann::json;

// The JSON object in `path`, or null when there is no such file.
json read_object_if_there(const std::string& path) {
  if (!path_exists(path)) return nullptr;
  json j = read_json_file(path);
  GLINT_CHECK(j.is_object(), path, ": expected a JSON object, got ", j.type_name());
  return j;
}

// generation_config.json's eos_token_id: an int or a list of them; none when absent or null.
std::vector<int64_t> eos_ids_of(const json& gen, const std::string& where) {
  std::vector<int64_t> out;
  auto e = gen.find("eos_token_id");
  if (e == gen.end() || e->is_null()) return out;
  for (const auto& v : e->is_array() ? *e : json::array({*e})) {
    GLINT_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, where, ": eos_token_id must be a token id (an "
                "integer >= 0) or a list of them, found ", e->dump());
    out.push_back(v.get<int64_t>());
  }
  return out;
}

// The sampling fields of `j` that `d` does not have yet (named in *seen); a null field
// means "off" (top_k 0, top_p 1) or GenerationConfig's default, as transformers reads it.
void read_sampling_fields(const json& j, const std::string& where, GenerationDefaults* d,
                          std::vector<std::string>* seen) {
  for (const char* key : {"do_sample", "temperature", "top_k", "top_p"}) {
    auto it = j.find(key);
    if (it == j.end() || std::find(seen->begin(), seen->end(), key) != seen->end()) continue;
    seen->push_back(key);
    const json& v = *it;
    const std::string k = key;
    if (k == "do_sample") {
      GLINT_CHECK(v.is_null() || v.is_boolean(), where, ": do_sample must be true or false, got ", v.dump());
      d->do_sample = v.is_boolean() && v.get<bool>();
    } else if (k == "temperature") {
      GLINT_CHECK(v.is_null() || (v.is_number() && v.get<double>() >= 0), where,
                  ": temperature must be a number >= 0, got ", v.dump());
      d->temperature = v.is_null() ? 1.0 : v.get<double>();
    } else if (k == "top_k") {
      GLINT_CHECK(v.is_null() || (v.is_number_integer() && v.get<int64_t>() >= 0), where,
                  ": top_k must be an integer >= 0, got ", v.dump());
      d->top_k = v.is_null() ? 0 : v.get<int64_t>();
    } else {
      GLINT_CHECK(v.is_null() || (v.is_number() && v.get<double>() > 0 && v.get<double>() <= 1), where,
                  ": top_p must be a number in (0, 1], got ", v.dump());
      d->top_p = v.is_null() ? 1.0 : v.get<double>();
    }
  }
}

}  // namespace

std::vector<int64_t> model_stop_token_ids(const std::string& model_dir, const std::string& tokenizer_dir,
                                          const Tokenizer* tokenizer) {
  std::vector<int64_t> ids;
  const std::string gen_path = model_dir + "/generation_config.json";
  json gen = model_dir.empty() ? json() : read_object_if_there(gen_path);
  if (!gen.is_null()) ids = eos_ids_of(gen, gen_path);
  const std::string cfg_path = model_dir + "/config.json";
  if (ids.empty() && !model_dir.empty() && path_exists(cfg_path)) {
    for (int64_t id : ModelConfig::from_file(cfg_path).eos_token_id) {
      GLINT_CHECK(id >= 0, cfg_path, ": eos_token_id must be a token id (an integer >= 0) or a list of them, found ",
                  id);
      ids.push_back(id);
    }
  }
  const std::string tok_dir = tokenizer_dir.empty() ? model_dir : tokenizer_dir;
  if (tokenizer || path_exists(tok_dir + "/tokenizer.json")) {
    auto specials = ChatTemplate::special_tokens_in(tok_dir);
    if (auto it = specials.find("eos_token"); it != specials.end()) {
      std::unique_ptr<Tokenizer> loaded;
      if (!tokenizer) {
        loaded = std::make_unique<Tokenizer>(Tokenizer::load(tok_dir));
        tokenizer = loaded.get();
      }
      if (int32_t eos = tokenizer->token_to_id(it->second); eos >= 0) ids.push_back(eos);
    }
  }
  std::vector<int64_t> unique;
  for (int64_t id : ids)
    if (std::find(unique.begin(), unique.end(), id) == unique.end()) unique.push_back(id);
  return unique;
}

GenerationDefaults read_generation_defaults(const std::string& model_dir, const std::string& tokenizer_dir,
                                            const Tokenizer* tokenizer) {
  GenerationDefaults d;
  std::vector<std::string> seen;
  const std::string gen_path = model_dir + "/generation_config.json";
  const std::string cfg_path = model_dir + "/config.json";
  if (json gen = read_object_if_there(gen_path); !gen.is_null()) {
    read_sampling_fields(gen, gen_path, &d, &seen);
  } else if (json cfg = read_object_if_there(cfg_path); !cfg.is_null()) {
    read_sampling_fields(cfg, cfg_path, &d, &seen);
    auto text = cfg.find("text_config");
    if (text != cfg.end() && text->is_object()) read_sampling_fields(*text, cfg_path + " (text_config)", &d, &seen);
  }
  d.stop_token_ids = model_stop_token_ids(model_dir, tokenizer_dir, tokenizer);
  return d;
}

}  // namespace glint
