// A chat template's source: parsed by ChatTemplate::from_source (the Jinja lexer and
// parser) and rendered over a fixed conversation with tools, as `glint train` renders
// a tokenizer's chat_template.
//
// GLINT_FUZZ_WRITE_SEEDS=DIR: writes glint's built-in templates into DIR and exits.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "template/builtin_templates.h"
#include "template/chat_template.h"

namespace {

const nlohmann::ordered_json& conversation() {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris? caf\u00e9 \ud83d\ude00"},
    {"role": "assistant", "content": "", "reasoning_content": "look it up",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21.5}"},
    {"role": "assistant", "content": "21.5 C.<think>x</think>"},
    {"role": "user", "content": ["part", {"type": "text", "text": "list content"}]}
  ])");
  return messages;
}

glint::ChatRenderOptions options(bool generation_prompt) {
  glint::ChatRenderOptions o;
  o.add_generation_prompt = generation_prompt;
  o.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
      "required": ["city"]}}}])");
  o.extra["enable_thinking"] = false;
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* out = std::getenv("GLINT_FUZZ_WRITE_SEEDS")) {
    std::filesystem::create_directories(out);
    for (const std::string& name : glint::builtin_chat_template_names())
      std::ofstream(std::string(out) + "/seed-builtin-" + name) << glint::find_builtin_chat_template(name)->source;
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    glint::ChatTemplate t = glint::ChatTemplate::from_source(
        source, {{"bos_token", "<s>"}, {"eos_token", "<|im_end|>"}, {"pad_token", "<pad>"}});
    for (bool prompt : {false, true}) {
      try {
        (void)t.render(conversation(), options(prompt));
      } catch (const glint::Error&) {
      }
    }
  } catch (const glint::Error&) {
  }
  return 0;
}
