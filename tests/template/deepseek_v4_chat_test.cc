// DeepSeek-V4's chat format: glint's built-in template against the strings the release's
// own encoder (encoding_dsv4.py) gives for the conversations of
// deepseek_v4_chat/cases.json (made by deepseek_v4_chat/generate.py); when the built-in
// template is chosen over a tokenizer's own; and training samples from it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "data/text_dataset.h"
#include "template/builtin_templates.h"
#include "template/chat_template.h"
#include "test_util.h"

namespace glint {
namespace {

using Json = nlohmann::ordered_json;

const std::string kCases = std::string(GLINT_TEST_DATA_DIR) + "/deepseek_v4_chat/cases.json";
const std::string kTokenizerJson = std::string(GLINT_TEST_DATA_DIR) + "/tokenizer_fixture/tokenizer.json";

Json read_cases() {
  std::ifstream in(kCases);
  EXPECT_TRUE(in) << kCases;
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str());
}

// A DeepSeek-V4 model directory as released: config.json with its model_type, a
// tokenizer_config.json without chat_template, and (when asked) the fixture tokenizer.
std::string deepseek_v4_dir(const std::string& name, bool with_tokenizer = false) {
  std::string d = testing::fresh_temp_dir("dsv4_" + name);
  std::ofstream(d + "/config.json") << R"({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"})";
  std::ofstream(d + "/tokenizer_config.json")
      << R"({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<｜begin▁of▁sentence｜>",)"
      << R"( "eos_token": "<｜end▁of▁sentence｜>"})";
  if (with_tokenizer) std::filesystem::copy_file(kTokenizerJson, d + "/tokenizer.json");
  return d;
}

ChatRenderOptions options_of(const Json& c) {
  ChatRenderOptions o;
  o.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  if (c.contains("tools")) o.tools = c["tools"];
  for (auto it = c["variables"].begin(); it != c["variables"].end(); ++it) o.extra[it.key()] = it.value();
  return o;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

TEST(DeepSeekV4ChatTemplate, RendersWhatTheReleaseEncoderWrites) {
  ChatTemplate t = ChatTemplate::load(deepseek_v4_dir("cases"));
  EXPECT_EQ(t.origin(), "glint's built-in deepseek_v4 chat template");
  Json cases = read_cases();
  ASSERT_GE(cases.size(), 20u);
  for (const Json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    ChatRenderOptions o = options_of(c);
    const std::string expected = c["expected"].get<std::string>();
    EXPECT_EQ(t.render(c["messages"], o), expected);
    if (o.add_generation_prompt) {
      // Without the generation prompt: the encoder's string less the assistant opening it
      // always writes after a final user turn.
      o.add_generation_prompt = false;
      std::string opening = std::string("<｜Assistant｜>") + (ends_with(expected, "<think>") ? "<think>" : "</think>");
      ASSERT_TRUE(ends_with(expected, opening)) << expected;
      EXPECT_EQ(t.render(c["messages"], o), expected.substr(0, expected.size() - opening.size()));
    }
  }
}

TEST(DeepSeekV4ChatTemplate, ChosenOnlyWhenTheDirectoryDefinesNoChatFormat) {
  // The released layout: no chat_template anywhere, model_type deepseek_v4.
  std::string d = deepseek_v4_dir("select");
  EXPECT_TRUE(ChatTemplate::defined_in(d));
  Json hi = Json::parse(R"([{"role": "user", "content": "hi"}])");
  ChatRenderOptions gen;
  gen.add_generation_prompt = true;
  EXPECT_EQ(ChatTemplate::load(d).render(hi, gen), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>");
  EXPECT_EQ(ChatTemplate::load(d).special_tokens().at("eos_token"), "<｜end▁of▁sentence｜>");

  // A directory's own template wins: chat_template.jinja, then tokenizer_config.json.
  std::ofstream(d + "/chat_template.jinja") << "J{{ messages | length }}";
  EXPECT_EQ(ChatTemplate::load(d).render(hi), "J1");
  std::ofstream(d + "/tokenizer_config.json") << R"({"chat_template": "C{{ messages | length }}"})";
  EXPECT_EQ(ChatTemplate::load(d).render(hi), "C1");
  std::filesystem::remove(d + "/chat_template.jinja");
  EXPECT_EQ(ChatTemplate::load(d).render(hi), "C1");

  // config.json alone is enough (no tokenizer_config.json).
  std::filesystem::remove(d + "/tokenizer_config.json");
  EXPECT_EQ(ChatTemplate::load(d).render(hi, gen), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>");

  // Another model without a template: the usual error, naming what was found.
  std::string other = testing::fresh_temp_dir("dsv4_other");
  std::ofstream(other + "/tokenizer_config.json") << R"({"eos_token": "</s>"})";
  std::ofstream(other + "/config.json") << R"({"model_type": "deepseek_v3"})";
  EXPECT_FALSE(ChatTemplate::defined_in(other));
  testing::expect_error_naming([&] { ChatTemplate::load(other); },
                               other + "/tokenizer_config.json has no \"chat_template\"");
  testing::expect_error_naming([&] { ChatTemplate::load(other); }, "model_type 'deepseek_v3'");
  std::filesystem::remove(other + "/config.json");
  EXPECT_FALSE(ChatTemplate::defined_in(other));
  testing::expect_error_naming([&] { ChatTemplate::load(other); }, "has no config.json model_type");
  testing::expect_error_naming([&] { ChatTemplate::load(testing::fresh_temp_dir("dsv4_empty")); },
                               "no tokenizer_config.json or chat_template.jinja");

  testing::expect_error_naming([] { ChatTemplate::builtin("deepseek_v9"); },
                               "no built-in chat template 'deepseek_v9' (built in: deepseek_v4)");
  ASSERT_NE(find_builtin_chat_template("deepseek_v4"), nullptr);
  EXPECT_EQ(find_builtin_chat_template("qwen3"), nullptr);
}

TEST(DeepSeekV4ChatTemplate, BadInputsAreErrorsNamingTheMessage) {
  ChatTemplate t = ChatTemplate::builtin("deepseek_v4");
  auto call = [](const Json& arguments) {
    Json m = Json::parse(R"({"role": "assistant", "content": "",
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f"}}]})");
    m["tool_calls"][0]["function"]["arguments"] = arguments;
    return Json::array({Json::parse(R"({"role": "user", "content": "go"})"), m});
  };
  testing::expect_error_naming([&] { t.render(call("[1, 2]")); },
                               "chat message 1 tool call 0: arguments must be a JSON object (or a string holding one), got \"[1, 2]\"");
  testing::expect_error_naming([&] { t.render(call(5)); }, "tool call arguments must be a JSON object");
  testing::expect_error_naming([&] { t.render(Json::parse(R"([{"role": "robot", "content": "x"}])")); },
                               "unknown role: robot");
  testing::expect_error_naming([&] { t.render(Json::parse(R"([{"role": "user", "content": "x", "task": "title"}])")); },
                               "quick instruction tasks");
  testing::expect_error_naming(
      [&] { t.render(Json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "x"}]}])")); },
      "user message content must be a string");
  ChatRenderOptions o;
  o.extra["reasoning_effort"] = "medium";
  testing::expect_error_naming([&] { t.render(Json::parse(R"([{"role": "user", "content": "x"}])"), o); },
                               "reasoning_effort must be 'max', 'high' or none, got medium");
}

// The text of the trained tokens.
std::string trained_text(const Sample& s, const Tokenizer& tok) {
  std::string out;
  for (size_t i = 0; i < s.input_ids.size(); ++i)
    if (s.labels[i] != kIgnoreIndex) out += tok.token_bytes(int32_t(s.input_ids[i]));
  return out;
}

TEST(DeepSeekV4ChatTemplate, TrainingSamples) {
  TextTokenizer t = TextTokenizer::load(deepseek_v4_dir("train", true));
  ASSERT_TRUE(t.chat.has_value());
  Json messages = Json::parse(R"([{"role": "user", "content": "hello"},
      {"role": "assistant", "reasoning_content": "greet", "content": "hello world"},
      {"role": "user", "content": "cat"},
      {"role": "assistant", "reasoning_content": "animal", "content": "world"}])");
  // Thinking (the default): earlier turns lose their reasoning once a user turn follows,
  // so each assistant turn is its own sample, trained on reasoning, answer and EOS.
  std::vector<Sample> samples = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, {});
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(trained_text(samples[0], t.tokenizer), "greet</think>hello world<｜end▁of▁sentence｜>");
  EXPECT_EQ(trained_text(samples[1], t.tokenizer), "animal</think>world<｜end▁of▁sentence｜>");
  const std::string second = "<｜begin▁of▁sentence｜><｜User｜>hello<｜Assistant｜></think>hello world<｜end▁of▁sentence｜>"
                             "<｜User｜>cat<｜Assistant｜><think>animal</think>world<｜end▁of▁sentence｜>";
  std::vector<int32_t> ids = t.tokenizer.encode(second, false);
  EXPECT_EQ(samples[1].input_ids, std::vector<int64_t>(ids.begin(), ids.end()));

  // Chat mode: one sample, every answer trained after its "</think>".
  TextDataOptions chat;
  chat.set_enable_thinking("false");
  samples = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, chat.chat);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(trained_text(samples[0], t.tokenizer), "hello world<｜end▁of▁sentence｜>world<｜end▁of▁sentence｜>");
}

TEST(DeepSeekV4ChatTemplate, GlintTemplateCommandUsesIt) {
  std::string d = deepseek_v4_dir("cli");
  std::ofstream(d + "/in.jsonl") << R"({"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "high"})"
                                 << "\n";
  std::string cmd = std::string(GLINT_BINARY) + " template --tokenizer " + d +
                    " --add-generation-prompt --enable-thinking false < " + d + "/in.jsonl 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_EQ(out, "\"<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>\"\n");
}

}  // namespace
}  // namespace glint
