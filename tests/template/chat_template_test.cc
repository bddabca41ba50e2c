// ChatTemplate: loading a tokenizer's chat template (string form, list of named
// templates, chat_template.jinja), special tokens, rendering, and `glint template`.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"
#include "template/chat_template.h"
#include "test_util.h"

namespace {

using ojson = nlohmann::ordered_json;

const char* kSimple =
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

std::string tokenizer_dir(const std::string& name, const nlohmann::json& config) {
  std::string d = glint::testing::fresh_temp_dir("chat_template_" + name);
  std::ofstream(d + "/tokenizer_config.json") << config.dump();
  return d;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const glint::Error& e) {
    return e.what();
  }
  return "";
}

ojson conversation() {
  return ojson::parse(R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])");
}

TEST(ChatTemplate, StringTemplateWithSpecialTokensInBothForms) {
  std::string d = tokenizer_dir("string", {{"chat_template", kSimple},
                                           {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
                                           {"eos_token", "</s>"},
                                           {"pad_token", nullptr}});
  glint::ChatTemplate t = glint::ChatTemplate::load(d);
  EXPECT_EQ(t.special_tokens().at("bos_token"), "<s>");
  EXPECT_EQ(t.special_tokens().count("pad_token"), 0u);
  EXPECT_EQ(t.render(conversation()), "<s><|user|>hi</s><|assistant|>hello</s>");
  glint::ChatRenderOptions o;
  o.add_generation_prompt = true;
  EXPECT_EQ(t.render(conversation(), o), "<s><|user|>hi</s><|assistant|>hello</s><|assistant|>");
}

TEST(ChatTemplate, NamedTemplatesPickToolUseWhenToolsAreGiven) {
  nlohmann::json config = {{"chat_template",
                            {{{"name", "default"}, {"template", "D{{ messages | length }}"}},
                             {{"name", "tool_use"}, {"template", "T{{ tools | length }}"}}}}};
  glint::ChatTemplate t = glint::ChatTemplate::from_config(config, "cfg");
  EXPECT_EQ(t.template_names(), (std::vector<std::string>{"default", "tool_use"}));
  EXPECT_EQ(t.render(conversation()), "D2");
  glint::ChatRenderOptions o;
  o.tools = ojson::array({{{"name", "f"}}});
  EXPECT_EQ(t.render(conversation(), o), "T1");
  o.template_name = "default";
  EXPECT_EQ(t.render(conversation(), o), "D2");
  o.template_name = "nope";
  EXPECT_NE(error_of([&] { t.render(conversation(), o); }).find("no chat template named 'nope' (available: default, tool_use)"),
            std::string::npos);
  glint::ChatTemplate only_tools = glint::ChatTemplate::from_config(
      {{"chat_template", {{{"name", "tool_use"}, {"template", "x"}}, {{"name", "rag"}, {"template", "y"}}}}}, "cfg2");
  EXPECT_NE(error_of([&] { only_tools.render(conversation()); }).find("no chat template named 'default'"), std::string::npos);
}

TEST(ChatTemplate, ExtraVariablesAndToolsReachTheTemplate) {
  glint::ChatTemplate t = glint::ChatTemplate::from_source(
      "{% if tools is defined %}[{{ tools[0].name }}]{% endif %}{{ enable_thinking is defined }}:{{ enable_thinking }}");
  EXPECT_EQ(t.render(conversation()), "false:");
  glint::ChatRenderOptions o;
  o.tools = ojson::array({{{"name", "f"}}});
  o.extra = {{"enable_thinking", false}};
  EXPECT_EQ(t.render(conversation(), o), "[f]true:false");
  o.extra = {{"messages", 1}};
  EXPECT_NE(error_of([&] { t.render(conversation(), o); }).find("would replace a chat template input"), std::string::npos);
}

TEST(ChatTemplate, JinjaFileFallback) {
  std::string d = tokenizer_dir("jinja_file", {{"eos_token", "<e>"}});
  std::ofstream(d + "/chat_template.jinja") << "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}\n";
  EXPECT_EQ(glint::ChatTemplate::load(d).render(conversation()), "hi<e>hello<e>");
}

TEST(ChatTemplate, BadConfigsAndInputsAreErrorsWithEvidence) {
  std::string d = tokenizer_dir("none", {{"eos_token", "</s>"}});
  std::string msg = error_of([&] { glint::ChatTemplate::load(d); });
  EXPECT_NE(msg.find(d + "/tokenizer_config.json has no \"chat_template\""), std::string::npos) << msg;
  msg = error_of([&] { glint::ChatTemplate::load(glint::testing::fresh_temp_dir("chat_template_empty")); });
  EXPECT_NE(msg.find("no tokenizer_config.json or chat_template.jinja"), std::string::npos) << msg;
  msg = error_of([&] { glint::ChatTemplate::from_config({{"chat_template", 5}}, "cfg"); });
  EXPECT_NE(msg.find("cfg: chat_template must be a string or a list"), std::string::npos) << msg;
  msg = error_of([&] { glint::ChatTemplate::from_config({{"chat_template", {{{"name", "a"}}}}}, "cfg"); });
  EXPECT_NE(msg.find("chat_template[0] must be {\"name\": string, \"template\": string}"), std::string::npos) << msg;
  msg = error_of([&] { glint::ChatTemplate::from_config({{"chat_template", "x"}, {"bos_token", 3}}, "cfg"); });
  EXPECT_NE(msg.find("bos_token must be a string or {\"content\": string}"), std::string::npos) << msg;
  msg = error_of([&] { glint::ChatTemplate::from_config({{"chat_template", "a\n{% if %}"}}, "cfg"); });
  EXPECT_NE(msg.find("cfg chat_template line 2"), std::string::npos) << msg;

  glint::ChatTemplate t = glint::ChatTemplate::from_source(kSimple);
  msg = error_of([&] { t.render(ojson::object()); });
  EXPECT_NE(msg.find("chat messages must be a JSON list"), std::string::npos) << msg;
  msg = error_of([&] { t.render(ojson::array({"hi"})); });
  EXPECT_NE(msg.find("chat message 0 must be a JSON object"), std::string::npos) << msg;
}

TEST(ChatTemplate, RaiseExceptionMessageSurfaces) {
  glint::ChatTemplate t = glint::ChatTemplate::from_source(
      "{% for m in messages %}\n{% if m.role not in ['user', 'assistant'] %}\n"
      "{{ raise_exception('Unsupported role: ' ~ m.role) }}\n{% endif %}{% endfor %}");
  std::string msg = error_of([&] { t.render(ojson::parse(R"([{"role": "robot", "content": "x"}])")); });
  EXPECT_EQ(msg, "chat template line 3: raise_exception: Unsupported role: robot");
}

struct RunResult {
  int exit_code;
  std::string output;
};

RunResult run_glint(const std::string& args) {
  FILE* p = popen((std::string(GLINT_BINARY) + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

TEST(ChatTemplateCli, RendersOneJsonStringPerLine) {
  std::string d = tokenizer_dir("cli", {{"chat_template", std::string(kSimple) + "{{ enable_thinking }}"}, {"eos_token", "</s>"}});
  std::ofstream(d + "/in.jsonl") << R"([{"role": "user", "content": "hi \"you\""}])" << "\n\n"
                                 << R"({"messages": [{"role": "user", "content": "é"}], "tools": []})" << "\n";
  RunResult r = run_glint("template --tokenizer " + d + " --add-generation-prompt --enable-thinking false < " + d + "/in.jsonl");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "\"<|user|>hi \\\"you\\\"</s><|assistant|>false\"\n\"<|user|>é</s><|assistant|>false\"\n");
}

TEST(ChatTemplateCli, BadLinesAndOptionsFailWithTheLineNumber) {
  std::string d = tokenizer_dir("cli_bad", {{"chat_template", "{{ raise_exception('nope') if messages | length > 1 }}ok"}});
  std::ofstream(d + "/in.jsonl") << "[]\n{not json\n";
  RunResult r = run_glint("template --tokenizer " + d + " < " + d + "/in.jsonl");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("\"ok\"\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("glint: error: stdin line 2: not JSON"), std::string::npos) << r.output;

  std::ofstream(d + "/in2.jsonl") << R"([{"role": "user"}, {"role": "user"}])" << "\n";
  r = run_glint("template --tokenizer " + d + " < " + d + "/in2.jsonl");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("stdin line 1: " + d + "/tokenizer_config.json chat_template line 1: raise_exception: nope"),
            std::string::npos)
      << r.output;

  std::ofstream(d + "/in3.jsonl") << R"({"tools": []})" << "\n";
  r = run_glint("template --tokenizer " + d + " < " + d + "/in3.jsonl");
  EXPECT_NE(r.output.find("stdin line 1: expected a JSON list of messages or an object with \"messages\""), std::string::npos)
      << r.output;

  r = run_glint("template --tokenizer " + d + " --enable-thinking maybe < /dev/null");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--enable-thinking must be true or false, got 'maybe'"), std::string::npos) << r.output;

  r = run_glint("template --tokenizer " + d + "/missing < /dev/null");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no tokenizer_config.json or chat_template.jinja in " + d + "/missing"), std::string::npos)
      << r.output;
}

}  // namespace
