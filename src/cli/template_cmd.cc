// glint template: render conversations with a tokenizer's chat template.
//
// Reads one conversation per stdin line, either a JSON list of messages or an object
// {"messages": [...], "tools": [...], <other template variables>}, and prints the
// rendered prompt as one JSON string per line. The first bad line stops the run with an
// error naming its line number.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "template/chat_template.h"

namespace glint::cli {

Action add_template(CLI::App& app) {
  struct Args {
    std::string tokenizer, enable_thinking, template_name;
    bool add_generation_prompt = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = add_command(app, "template");
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer directory (tokenizer_config.json)")->required();
  cmd->add_flag("--add-generation-prompt", a->add_generation_prompt, "end with the start of an assistant turn");
  cmd->add_option("--enable-thinking", a->enable_thinking, "true or false: sets the template variable enable_thinking");
  cmd->add_option("--template-name", a->template_name, "which named chat template to use (default: automatic)");
  return [a]() {
    ChatRenderOptions base;
    base.add_generation_prompt = a->add_generation_prompt;
    base.template_name = a->template_name;
    if (!a->enable_thinking.empty()) {
      GLINT_CHECK(a->enable_thinking == "true" || a->enable_thinking == "false",
                  "--enable-thinking must be true or false, got '", a->enable_thinking, "'");
      base.extra["enable_thinking"] = a->enable_thinking == "true";
    }
    ChatTemplate tpl = ChatTemplate::load(a->tokenizer);
    std::string line;
    int64_t lineno = 0;
    while (std::getline(std::cin, line)) {
      ++lineno;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      try {
        nlohmann::ordered_json in;
        try {
          in = nlohmann::ordered_json::parse(line);
        } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
          fail("not JSON: ", e.what());
        }
        ChatRenderOptions o = base;
        nlohmann::ordered_json messages;
        if (in.is_array()) {
          messages = in;
        } else {
          GLINT_CHECK(in.is_object() && in.contains("messages"),
                      "expected a JSON list of messages or an object with \"messages\"");
          for (auto it = in.begin(); it != in.end(); ++it) {
            if (it.key() == "messages") messages = it.value();
            else if (it.key() == "tools") o.tools = it.value();
            else o.extra[it.key()] = it.value();
          }
        }
        std::string out = tpl.render(messages, o);
        std::cout << nlohmann::json(out).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      } catch (const Error& e) {
        throw Error(detail::concat("stdin line ", lineno, ": ", e.what()));
      }
    }
    std::cout.flush();
    return 0;
  };
}

}  // namespace glint::cli
