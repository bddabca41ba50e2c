#include "template/chat_template.h"

#include "core/error.h"
#include "core/fs.h"
#include "template/builtin_templates.h"
#include "template/jinja.h"

namespace glint {
namespace {

const char* const kSpecialTokens[] = {"bos_token", "eos_token", "pad_token", "unk_token"};

std::shared_ptr<jinja::Template> compile(const std::string& source, const std::string& label) {
  return std::make_shared<jinja::Template>(source, label);
}

// bos/eos/pad/unk_token of a tokenizer config: a string or {"content": string}; null or
// absent ones are left out (as transformers' special_tokens_map does).
std::map<std::string, std::string> special_tokens_of(const nlohmann::json& config, const std::string& origin) {
  std::map<std::string, std::string> out;
  for (const char* key : kSpecialTokens) {
    auto tok = config.find(key);
    if (tok == config.end() || tok->is_null()) continue;
    if (tok->is_string()) out[key] = tok->get<std::string>();
    else if (tok->is_object() && tok->contains("content") && (*tok)["content"].is_string())
      out[key] = (*tok)["content"].get<std::string>();
    else
      fail(origin, ": ", key, " must be a string or {\"content\": string}, got ", tok->dump());
  }
  return out;
}

// DIR/config.json's model_type: "" when there is no such file or key.
std::string model_type_in(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!path_exists(path)) return "";
  nlohmann::json config = read_json_file(path);
  auto it = config.is_object() ? config.find("model_type") : config.end();
  return config.is_object() && it != config.end() && it->is_string() ? it->get<std::string>() : "";
}

// "deepseek_v4, ...": the model_types glint has a built-in template for.
std::string builtin_names() {
  std::string names;
  for (const std::string& n : builtin_chat_template_names()) names += (names.empty() ? "" : ", ") + n;
  return names;
}

// A JSON value shortened for an error message.
std::string brief(const nlohmann::ordered_json& v) {
  std::string s = v.dump();
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

// `messages` with each tool call's "arguments" string (under "function", or on the call)
// replaced by the JSON object it holds, as DeepSeek-V4's encoder reads it (json.loads,
// and {"arguments": the string} for a string that is not JSON).
nlohmann::ordered_json with_parsed_tool_arguments(const nlohmann::ordered_json& messages) {
  nlohmann::ordered_json out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    auto calls = out[i].find("tool_calls");
    if (calls == out[i].end() || !calls->is_array()) continue;
    for (size_t k = 0; k < calls->size(); ++k) {
      nlohmann::ordered_json& call = (*calls)[k];
      if (!call.is_object()) continue;
      const bool nested = call.contains("function") && call["function"].is_object();
      nlohmann::ordered_json& holder = nested ? call["function"] : call;
      auto args = holder.find("arguments");
      if (args == holder.end() || !args->is_string()) continue;
      const std::string text = args->get<std::string>();
      nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) {
        parsed = nlohmann::ordered_json::object();
        parsed["arguments"] = text;
      }
      GLINT_CHECK(parsed.is_object(), "chat message ", i, " tool call ", k,
                  ": arguments must be a JSON object (or a string holding one), got ", brief(*args));
      *args = std::move(parsed);
    }
  }
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::load(const std::string& dir) {
  std::string config_path = dir + "/tokenizer_config.json";
  std::string jinja_path = dir + "/chat_template.jinja";
  nlohmann::json config = nlohmann::json::object();
  bool have_config = path_exists(config_path);
  if (have_config) config = read_json_file(config_path);
  bool has_template = config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null();
  const std::string model_type = has_template || path_exists(jinja_path) ? "" : model_type_in(dir);
  if (find_builtin_chat_template(model_type)) {
    GLINT_CHECK(config.is_object(), config_path, ": expected a JSON object");
    return builtin(model_type,
                   have_config ? special_tokens_of(config, config_path) : std::map<std::string, std::string>{});
  }
  GLINT_CHECK(have_config || path_exists(jinja_path), "no tokenizer_config.json or chat_template.jinja in ", dir);
  if (!has_template && path_exists(jinja_path)) {
    GLINT_CHECK(config.is_object(), config_path, ": expected a JSON object");
    ChatTemplate t;
    t.origin_ = jinja_path;
    t.templates_.emplace_back("default", compile(read_file(jinja_path), jinja_path));
    t.special_tokens_ = special_tokens_of(config, config_path);
    return t;
  }
  const std::string found = model_type.empty() ? dir + " has no config.json model_type"
                                                : dir + "/config.json has model_type '" + model_type + "'";
  GLINT_CHECK(has_template, config_path, " has no \"chat_template\" and there is no ", jinja_path,
              " (this tokenizer defines no chat format, and glint has built-in ones only for model_type ",
              builtin_names(), "; ", found, ")");
  return from_config(config, config_path);
}

bool ChatTemplate::defined_in(const std::string& dir) {
  if (path_exists(dir + "/chat_template.jinja")) return true;
  std::string config_path = dir + "/tokenizer_config.json";
  if (path_exists(config_path)) {
    nlohmann::json config = read_json_file(config_path);
    if (config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null()) return true;
  }
  return find_builtin_chat_template(model_type_in(dir)) != nullptr;
}

std::map<std::string, std::string> ChatTemplate::special_tokens_in(const std::string& dir) {
  std::string config_path = dir + "/tokenizer_config.json";
  if (!path_exists(config_path)) return {};
  nlohmann::json config = read_json_file(config_path);
  GLINT_CHECK(config.is_object(), config_path, ": expected a JSON object");
  return special_tokens_of(config, config_path);
}

ChatTemplate ChatTemplate::from_config(const nlohmann::json& config, const std::string& origin) {
  GLINT_CHECK(config.is_object(), origin, ": expected a JSON object");
  ChatTemplate t;
  t.origin_ = origin;
  auto it = config.find("chat_template");
  GLINT_CHECK(it != config.end() && !it->is_null(), origin, " has no \"chat_template\" (this tokenizer defines no chat format)");
  if (it->is_string()) {
    t.templates_.emplace_back("default", compile(it->get<std::string>(), origin + " chat_template"));
  } else if (it->is_array()) {
    for (size_t k = 0; k < it->size(); ++k) {
      const auto& e = (*it)[k];
      GLINT_CHECK(e.is_object() && e.contains("name") && e["name"].is_string() && e.contains("template") &&
                      e["template"].is_string(),
                  origin, ": chat_template[", k, "] must be {\"name\": string, \"template\": string}, got ", e.dump());
      std::string name = e["name"].get<std::string>();
      t.templates_.emplace_back(name, compile(e["template"].get<std::string>(), origin + " chat_template '" + name + "'"));
    }
    GLINT_CHECK(!t.templates_.empty(), origin, ": chat_template is an empty list");
  } else {
    fail(origin, ": chat_template must be a string or a list of {name, template}, got ", it->type_name());
  }
  t.special_tokens_ = special_tokens_of(config, origin);
  return t;
}

ChatTemplate ChatTemplate::from_source(const std::string& source, std::map<std::string, std::string> special_tokens) {
  ChatTemplate t;
  t.origin_ = "chat template";
  t.templates_.emplace_back("default", compile(source, "chat template"));
  t.special_tokens_ = std::move(special_tokens);
  return t;
}

ChatTemplate ChatTemplate::builtin(const std::string& name, std::map<std::string, std::string> special_tokens) {
  const BuiltinChatTemplate* b = find_builtin_chat_template(name);
  GLINT_CHECK(b, "glint has no built-in chat template '", name, "' (built in: ", builtin_names(), ")");
  ChatTemplate t;
  t.origin_ = "glint's built-in " + name + " chat template";
  t.templates_.emplace_back("default", compile(b->source, t.origin_));
  t.special_tokens_ = std::move(special_tokens);
  t.parses_tool_arguments_ = b->parses_tool_arguments;
  return t;
}

std::vector<std::string> ChatTemplate::template_names() const {
  std::vector<std::string> out;
  for (const auto& kv : templates_) out.push_back(kv.first);
  return out;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const ChatRenderOptions& o) const {
  GLINT_CHECK(messages.is_array(), "chat messages must be a JSON list of message objects, got ", messages.type_name());
  for (size_t k = 0; k < messages.size(); ++k)
    GLINT_CHECK(messages[k].is_object(), "chat message ", k, " must be a JSON object, got ", messages[k].dump());
  GLINT_CHECK(o.tools.is_null() || o.tools.is_array(), "tools must be a JSON list, got ", o.tools.type_name());
  GLINT_CHECK(o.extra.is_object(), "extra template variables must be a JSON object");

  auto find = [&](const std::string& n) -> const jinja::Template* {
    for (const auto& kv : templates_)
      if (kv.first == n) return kv.second.get();
    return nullptr;
  };
  const jinja::Template* tpl = nullptr;
  if (templates_.size() == 1 && o.template_name.empty()) {
    tpl = templates_[0].second.get();
  } else {
    std::string want = o.template_name;
    if (want.empty()) want = !o.tools.is_null() && find("tool_use") ? "tool_use" : "default";
    tpl = find(want);
    if (!tpl) {
      std::string names;
      for (const auto& kv : templates_) names += (names.empty() ? "" : ", ") + kv.first;
      fail(origin_, ": no chat template named '", want, "' (available: ", names, ")");
    }
  }

  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = parses_tool_arguments_ ? with_parsed_tool_arguments(messages) : messages;
  if (!o.tools.is_null()) ctx["tools"] = o.tools;
  ctx["add_generation_prompt"] = o.add_generation_prompt;
  for (const auto& [k, v] : special_tokens_) ctx[k] = v;
  for (auto it = o.extra.begin(); it != o.extra.end(); ++it) {
    GLINT_CHECK(it.key() != "messages" && it.key() != "tools" && it.key() != "add_generation_prompt",
                "extra template variable '", it.key(), "' would replace a chat template input");
    ctx[it.key()] = it.value();
  }
  jinja::RenderOptions ro;
  ro.now = o.now;
  return tpl->render(ctx, ro);
}

}  // namespace glint
