// Chat templates of Hugging Face tokenizers: load the Jinja `chat_template` of a
// tokenizer directory and render a conversation to the prompt string the model was
// trained on, as transformers' apply_chat_template(tokenize=False) does (rendered with
// the semantics of @huggingface/jinja, see template/jinja.h). For a model whose release
// defines its chat format without a Jinja template (DeepSeek-V4), glint's built-in one
// (template/builtin_templates.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace glint {

namespace jinja {
class Template;
}

struct ChatRenderOptions {
  bool add_generation_prompt = false;  // end with the opening of an assistant turn
  nlohmann::ordered_json tools;        // null: no `tools` variable; else a list of tool schemas
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more variables, e.g. enable_thinking
  std::string template_name;           // "": "tool_use" when tools are given and it exists, else "default"
  std::optional<int64_t> now;          // the time strftime_now() formats (seconds since the epoch,
                                       // local time zone); unset: the system clock
};

class ChatTemplate {
 public:
  // Loads DIR/tokenizer_config.json: `chat_template` as a string or as a list of
  // {"name", "template"}; when the config has none, DIR/chat_template.jinja; when there
  // is neither, the built-in template of DIR/config.json's model_type (builtin()), if
  // glint has one. Special tokens bos/eos/pad/unk_token (a string or {"content": ...})
  // become variables. Throws glint::Error naming the file when there is no chat template
  // (and the model_type it found) or it is malformed.
  static ChatTemplate load(const std::string& tokenizer_dir);
  // Whether DIR defines a chat format (a "chat_template" in tokenizer_config.json,
  // chat_template.jinja, or a model_type with a built-in template in config.json); load()
  // then succeeds unless the template is malformed.
  static bool defined_in(const std::string& tokenizer_dir);
  // The special tokens (bos/eos/pad/unk_token) of DIR/tokenizer_config.json, with or
  // without a chat template; empty when there is no such file.
  static std::map<std::string, std::string> special_tokens_in(const std::string& tokenizer_dir);
  // The same from an already parsed tokenizer_config.json; `origin` names it in errors.
  static ChatTemplate from_config(const nlohmann::json& config, const std::string& origin);
  // A single template source with explicit special tokens (tests, custom templates).
  static ChatTemplate from_source(const std::string& source, std::map<std::string, std::string> special_tokens = {});
  // glint's built-in template `name` (template/builtin_templates.h, e.g. "deepseek_v4").
  // When it parses tool arguments, render() first replaces each tool call's "arguments"
  // string with the JSON object it holds (one that is not JSON becomes {"arguments":
  // the string}, as the release's encoder does). Throws glint::Error listing the names
  // for an unknown one.
  static ChatTemplate builtin(const std::string& name, std::map<std::string, std::string> special_tokens = {});

  // Renders `messages` (a JSON list of message objects). Throws glint::Error on bad
  // input (e.g. tool call arguments holding JSON that is not an object, for a template
  // that parses them) or a template error (a raise_exception() message included verbatim).
  std::string render(const nlohmann::ordered_json& messages, const ChatRenderOptions& options = {}) const;

  std::vector<std::string> template_names() const;
  // Special token variables ("bos_token" -> "<s>"); absent when the config has none.
  const std::map<std::string, std::string>& special_tokens() const { return special_tokens_; }
  // Where the template comes from: a file ("DIR/tokenizer_config.json") or
  // "glint's built-in deepseek_v4 chat template".
  const std::string& origin() const { return origin_; }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<jinja::Template>>> templates_;
  std::map<std::string, std::string> special_tokens_;
  std::string origin_;
  bool parses_tool_arguments_ = false;  // see builtin()
};

}  // namespace glint
