// Chat templates glint carries for models whose release defines the chat format without
// a Jinja chat_template: DeepSeek-V4 ships a Python encoder (encoding/encoding_dsv4.py)
// and a tokenizer_config.json with no "chat_template". Each one here is glint's own
// Jinja, rendered by the same engine as a tokenizer's template and checked against the
// release's encoder (tests/data/deepseek_v4_chat/). ChatTemplate::load picks one when a
// tokenizer directory defines no chat format and its config.json names the model_type.
#pragma once

#include <string>
#include <vector>

namespace glint {

struct BuiltinChatTemplate {
  std::string name;    // also the config.json model_type it serves, e.g. "deepseek_v4"
  std::string source;  // the Jinja template
  // The release's encoder reads a tool call's "arguments" JSON string parameter by
  // parameter; Jinja cannot parse JSON, so ChatTemplate::render parses such strings
  // into objects before rendering (see chat_template.h).
  bool parses_tool_arguments = false;
};

// The built-in template named `name` (a model_type); null when glint has none.
const BuiltinChatTemplate* find_builtin_chat_template(const std::string& name);

// Every built-in template's name, in a fixed order (for messages).
std::vector<std::string> builtin_chat_template_names();

}  // namespace glint
