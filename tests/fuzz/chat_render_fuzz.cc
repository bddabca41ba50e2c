// A conversation (a JSON list of messages, or {"messages": [...], "tools": [...],
// "add_generation_prompt": bool, "enable_thinking": bool}) rendered by fixed templates: the tool-calling fixture
// of the reference tests (macros, call blocks, tojson, dictsort, loop variables) and
// glint's built-in DeepSeek-V4 template (which parses tool-call arguments).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "template/chat_template.h"

namespace {

const std::vector<glint::ChatTemplate>& templates() {
  static const std::vector<glint::ChatTemplate> all = [] {
    std::map<std::string, std::string> special = {{"bos_token", "<s>"}, {"eos_token", "<|im_end|>"}};
    std::vector<glint::ChatTemplate> v;
    for (const char* name : {"tool_use.jinja", "default.jinja"}) {
      std::ifstream in(std::string(GLINT_SOURCE_DIR) + "/tests/reference/template_fixtures/" + name);
      std::stringstream source;
      source << in.rdbuf();
      glint::fuzz::check(in.good() || in.eof(), "the fixture templates are readable");
      v.push_back(glint::ChatTemplate::from_source(source.str(), special));
    }
    v.push_back(glint::ChatTemplate::builtin("deepseek_v4", special));
    return v;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::ordered_json input;
  try {
    input = nlohmann::ordered_json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0;  // glint reads JSON with nlohmann's parser before any template sees it
  }
  glint::ChatRenderOptions options;
  nlohmann::ordered_json messages = input;
  if (input.is_object()) {
    messages = input.contains("messages") ? input["messages"] : nlohmann::ordered_json();
    if (input.contains("tools")) options.tools = input["tools"];
    if (input.contains("add_generation_prompt") && input["add_generation_prompt"].is_boolean())
      options.add_generation_prompt = input["add_generation_prompt"].get<bool>();
    // The one extra variable glint sets (--enable-thinking).
    if (input.contains("enable_thinking") && input["enable_thinking"].is_boolean())
      options.extra["enable_thinking"] = input["enable_thinking"];
  }
  for (const glint::ChatTemplate& t : templates()) {
    try {
      (void)t.render(messages, options);
    } catch (const glint::Error&) {
    }
  }
  return 0;
}
