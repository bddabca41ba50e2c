// Chat, prompt/completion and text data: tokens and labels checked against spans derived
// by hand from the rendered strings (for ChatML-like fixtures and for the published gpt-oss
// and GLM-4.5 templates); bad lines; and `glint train` end to end on a model directory
// that holds a tokenizer and a chat template.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "data/text_dataset.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::error_message;
using glint::testing::run_command;

using Json = nlohmann::ordered_json;

const std::string kTokenizerJson = std::string(GLINT_TEST_DATA_DIR) + "/tokenizer_fixture/tokenizer.json";

// ChatML, as Qwen's templates render it.
const char* kChatMl =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// Like ChatML, but earlier assistant turns are shortened once a later turn follows (as
// Qwen3 drops earlier turns' thinking).
const char* kRewritesHistory =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and not loop.last %}{{ m.content[:1] }}{% else %}{{ m.content }}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// A tokenizer directory with the fixture tokenizer and a chat template.
std::string tokenizer_dir(const std::string& name, const std::string& chat_template) {
  std::string d = testing::fresh_temp_dir("text_" + name);
  std::filesystem::copy_file(kTokenizerJson, d + "/tokenizer.json");
  Json cfg = {{"eos_token", "<|im_end|>"}, {"chat_template", chat_template}};
  std::ofstream(d + "/tokenizer_config.json") << cfg.dump();
  return d;
}

// The text of the trained tokens and of the others, each concatenated.
std::pair<std::string, std::string> split_by_label(const Sample& s, const Tokenizer& tok) {
  std::string trained, rest;
  for (size_t i = 0; i < s.input_ids.size(); ++i)
    (s.labels[i] == kIgnoreIndex ? rest : trained) += tok.token_bytes(int32_t(s.input_ids[i]));
  return {trained, rest};
}

TEST(TextData, ChatTrainsOnlyAssistantTurnsAndTheirEndToken) {
  TextTokenizer t = TextTokenizer::load(tokenizer_dir("chat", kChatMl));
  Json messages = Json::parse(R"([{"role":"system","content":"be nice"},{"role":"user","content":"hello"},
      {"role":"assistant","content":"hello world"},{"role":"user","content":"cat"},
      {"role":"assistant","content":"world"}])");
  auto samples = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, {});
  ASSERT_EQ(samples.size(), 1u);
  const Sample& s = samples[0];
  // The whole conversation, tokenized as one text.
  std::string text = "<|im_start|>system\nbe nice<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n"
                     "<|im_start|>assistant\nhello world<|im_end|>\n<|im_start|>user\ncat<|im_end|>\n"
                     "<|im_start|>assistant\nworld<|im_end|>\n";
  std::vector<int32_t> ids = t.tokenizer.encode(text, false);
  ASSERT_EQ(s.input_ids, std::vector<int64_t>(ids.begin(), ids.end()));
  auto [trained, rest] = split_by_label(s, t.tokenizer);
  EXPECT_EQ(trained, "hello world<|im_end|>world<|im_end|>");
  EXPECT_EQ(rest, "<|im_start|>system\nbe nice<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
                  "\n<|im_start|>user\ncat<|im_end|>\n<|im_start|>assistant\n\n");
  for (size_t i = 0; i < s.labels.size(); ++i)
    if (s.labels[i] != kIgnoreIndex) EXPECT_EQ(s.labels[i], s.input_ids[i]);
  // The model's stop token (Qwen's <|im_end|>) changes nothing: it already ends each turn,
  // and what follows it is no stop token.
  ChatDataOptions stops;
  stops.stop_ids = {t.tokenizer.token_to_id("<|im_end|>")};
  auto same = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, stops);
  ASSERT_EQ(same.size(), 1u);
  EXPECT_EQ(same[0].input_ids, s.input_ids);
  EXPECT_EQ(same[0].labels, s.labels);
}

TEST(TextData, TemplateThatRewritesHistoryGivesOneSamplePerTurn) {
  TextTokenizer t = TextTokenizer::load(tokenizer_dir("history", kRewritesHistory));
  Json messages = Json::parse(R"([{"role":"user","content":"hello"},{"role":"assistant","content":"world"},
      {"role":"user","content":"cat"},{"role":"assistant","content":"hello"}])");
  auto samples = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, {});
  ASSERT_EQ(samples.size(), 2u);
  // Each sample is the conversation up to its turn, as the model sees it then.
  auto [trained0, rest0] = split_by_label(samples[0], t.tokenizer);
  EXPECT_EQ(trained0, "world<|im_end|>");
  EXPECT_EQ(rest0, "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n\n");
  auto [trained1, rest1] = split_by_label(samples[1], t.tokenizer);
  EXPECT_EQ(trained1, "hello<|im_end|>");
  EXPECT_EQ(rest1, "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nw<|im_end|>\n"
                   "<|im_start|>user\ncat<|im_end|>\n<|im_start|>assistant\n\n");
  // With the model's stop token, the same samples.
  ChatDataOptions stops;
  stops.stop_ids = {t.tokenizer.token_to_id("<|im_end|>")};
  auto same = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, stops);
  ASSERT_EQ(same.size(), samples.size());
  for (size_t k = 0; k < same.size(); ++k) {
    EXPECT_EQ(same[k].input_ids, samples[k].input_ids);
    EXPECT_EQ(same[k].labels, samples[k].labels);
  }
}

TEST(TextData, PromptCompletionTrainsTheCompletionAndEos) {
  TextTokenizer t = TextTokenizer::load(tokenizer_dir("pc", kChatMl));
  ASSERT_GE(t.eos_id, 0);
  // "hello" + " world": the completion's first token " world" (Ġworld) is trained.
  Sample s = tokenize_prompt_completion("hello", " world", t.tokenizer, t.eos_id);
  auto [trained, rest] = split_by_label(s, t.tokenizer);
  EXPECT_EQ(trained, " world<|im_end|>");
  EXPECT_EQ(rest, "hello");
  EXPECT_EQ(s.input_ids.back(), t.eos_id);
}

std::string write_lines(const std::string& dir, const std::vector<std::string>& lines) {
  std::string path = dir + "/data.jsonl";
  std::ofstream out(path, std::ios::binary);
  for (const auto& l : lines) out << l << "\n";
  return path;
}

// `bad` as the second of three lines: an error naming data.jsonl:2 and `expect`; with
// --max-bad-lines 1 the line is skipped and counted, and the other two are read.
void expect_bad_second_line(const std::string& dir, const TextTokenizer& t, const std::string& good,
                            const std::string& bad, const std::string& expect) {
  std::string path = write_lines(dir, {good, bad, good});
  TextDataOptions o;
  std::string e = error_message([&] { read_text_jsonl(path, t.tokenizer, &*t.chat, t.eos_id, o, nullptr); });
  EXPECT_NE(e.find("data.jsonl:2: "), std::string::npos) << bad << " -> " << e;
  EXPECT_NE(e.find(expect), std::string::npos) << bad << " -> " << e;
  o.max_bad_lines = 1;
  TextDataStats st;
  EXPECT_EQ(read_text_jsonl(path, t.tokenizer, &*t.chat, t.eos_id, o, &st).size(), 2u) << bad;
  EXPECT_EQ(st.bad_lines, 1) << bad;
  EXPECT_NE(st.first_bad.find("data.jsonl:2: "), std::string::npos) << st.first_bad;
}

TEST(TextData, BadLinesNameFileLineAndReason) {
  std::string dir = tokenizer_dir("bad", kChatMl);
  TextTokenizer t = TextTokenizer::load(dir);
  const std::string good = R"({"messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"world"}]})";
  struct Case {
    std::string line, expect;
  };
  std::vector<Case> cases = {
      {"{\"text\": \"caf\xC3\"}", "data.jsonl:2:"},  // invalid UTF-8
      {R"({"messages":[{"role":"wizard","content":"hi"},{"role":"assistant","content":"x"}]})",
       "message 0 has unknown role 'wizard' (expected system, developer, user, assistant or tool)"},
      {R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":""}]})",
       "message 1 is an empty assistant turn"},
      {R"({"messages":[{"role":"user","content":"hi"}]})", "no assistant turn"},
      {R"({"messages":[]})", "non-empty list"},
      {R"({"prompt":"a"})", "\"prompt\" and \"completion\" must both be strings"},
      {R"({"question":"a"})", "expected \"messages\""},
      {"not json", "data.jsonl:2: invalid JSON"},
      // Found by fuzzing: nlohmann's out_of_range for a number beyond double's range.
      {R"({"text": 1e999})", "data.jsonl:2: invalid JSON"},
  };
  for (const auto& c : cases) {
    expect_bad_second_line(dir, t, good, c.line, c.expect);
  }
}

TEST(TextData, LongSamplesAreCutToSeqLenAndCounted) {
  std::string dir = tokenizer_dir("long", kChatMl);
  TextTokenizer t = TextTokenizer::load(dir);
  std::string path = write_lines(
      dir, {R"({"text":"hello world hello world hello world"})",
            // The assistant turn starts after 8 tokens: nothing left to train within 6.
            R"({"messages":[{"role":"user","content":"hello world hello"},{"role":"assistant","content":"cat"}]})"});
  TextDataOptions o;
  o.seq_len = 6;
  TextDataStats st;
  auto samples = read_text_jsonl(path, t.tokenizer, &*t.chat, t.eos_id, o, &st);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].input_ids.size(), 6u);
  EXPECT_EQ(st.truncated, 2);
  EXPECT_EQ(st.dropped, 1);
  // A chat line without a chat template is an error naming the line.
  std::string e = error_message([&] { read_text_jsonl(path, t.tokenizer, nullptr, t.eos_id, {}, nullptr); });
  EXPECT_NE(e.find("data.jsonl:2: a chat line needs the model's chat template"), std::string::npos) << e;
}

// A tokenizer without a chat format still trains on text with its EOS; a malformed chat
// template is reported when the tokenizer is loaded, not as a missing one later.
TEST(TextData, TokenizerWithoutOrWithABrokenChatTemplate) {
  std::string dir = testing::fresh_temp_dir("text_no_template");
  std::filesystem::copy_file(kTokenizerJson, dir + "/tokenizer.json");
  std::ofstream(dir + "/tokenizer_config.json") << Json{{"eos_token", "<|im_end|>"}}.dump();
  TextTokenizer t = TextTokenizer::load(dir);
  EXPECT_FALSE(t.chat.has_value());
  EXPECT_EQ(t.eos_id, t.tokenizer.token_to_id("<|im_end|>"));
  ASSERT_GE(t.eos_id, 0);
  std::string path = write_lines(dir, {R"({"text":"hello world"})"});
  auto samples = read_text_jsonl(path, t.tokenizer, nullptr, t.eos_id, {}, nullptr);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].input_ids.back(), t.eos_id);

  std::ofstream(dir + "/tokenizer_config.json") << Json{{"chat_template", "{% if %}x{% endif %}"}}.dump();
  std::string e = error_message([&] { TextTokenizer::load(dir); });
  EXPECT_NE(e.find("tokenizer_config.json"), std::string::npos) << e;
  EXPECT_EQ(e.find("needs the model's chat template"), std::string::npos) << e;
}

// A Hub-style model directory (config.json, weights, tokenizer.json, tokenizer_config.json)
// and a chat JSONL: `glint train` tokenizes, trains and saves; `glint data preview` marks.
TEST(TextData, TrainOnAChatFileEndToEnd) {
  std::string dir = tokenizer_dir("e2e", kChatMl);
  Json cfg = {{"model_type", "qwen3_moe"}, {"vocab_size", 274}, {"hidden_size", 32}, {"intermediate_size", 48},
              {"moe_intermediate_size", 16}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
              {"num_key_value_heads", 2}, {"head_dim", 8}, {"num_experts", 4}, {"num_experts_per_tok", 2}};
  std::ofstream(dir + "/model-config.json") << cfg.dump();
  int code;
  std::string out = run_command(std::string(GLINT_BINARY) + " init-model --config " + dir + "/model-config.json --output " +
                            dir + "/model",
                        &code);
  ASSERT_EQ(code, 0) << out;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(dir + "/" + f, dir + "/model/" + f);
  std::vector<std::string> lines;
  for (int i = 0; i < 8; ++i)
    lines.push_back(R"({"messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"world cat"}]})");
  std::string data = write_lines(dir, lines);
  out = run_command(std::string(GLINT_BINARY) + " train --model " + dir + "/model --data " + data +
                " --steps 3 --batch-size 4 --lr 1e-2 --output " + dir + "/out",
            &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("8 samples from 8 lines"), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/out/adapter/adapter_model.safetensors"));
  // The run records the day its chat templates rendered (today), so that --resume and
  // --config render as it did.
  const std::string config = read_file(dir + "/out/config.toml");
  const size_t at = config.find("\nchat-date=\"");
  ASSERT_NE(at, std::string::npos) << config;
  const std::string recorded = config.substr(at + 12, 10);
  EXPECT_EQ(config.substr(at + 22, 2), "\"\n") << config;
  EXPECT_NO_THROW(chat_date_clock(recorded)) << recorded;
  out = run_command(std::string(GLINT_BINARY) + " data preview --model " + dir + "/model --data " + data, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("<|im_start|>assistant\n⟦world cat<|im_end|>⟧"), std::string::npos) << out;
  // A date that is not a day is refused before anything loads, from the command line or a
  // config file, naming the flag.
  out = run_command(std::string(GLINT_BINARY) + " train --model " + dir + "/model --data " + data +
                        " --chat-date 2025-02-30 --output " + dir + "/bad",
                    &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--chat-date must be a day written YYYY-MM-DD (e.g. 2025-06-15), got '2025-02-30'"),
            std::string::npos) << out;
  std::ofstream(dir + "/run.toml") << "chat_date = \"15/06/2025\"\n";
  out = run_command(std::string(GLINT_BINARY) + " train --config " + dir + "/run.toml --model " + dir +
                        "/model --data " + data + " --output " + dir + "/bad",
                    &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--chat-date must be a day written YYYY-MM-DD"), std::string::npos) << out;
  EXPECT_NE(out.find("'15/06/2025'"), std::string::npos) << out;
}

// The samples of a one-line data file holding `json` (written on one line).
std::vector<Sample> samples_of_line(const std::string& dir, const TextTokenizer& t, const std::string& json) {
  std::string path = write_lines(dir, {Json::parse(json).dump()});
  return read_text_jsonl(path, t.tokenizer, &*t.chat, t.eos_id, {}, nullptr);
}

// A line of another form gives the very samples (ids and labels) of its {"messages"} line.
void expect_same_samples(const std::string& dir, const TextTokenizer& t, const std::string& line,
                         const std::string& messages_line) {
  std::vector<Sample> got = samples_of_line(dir, t, line), want = samples_of_line(dir, t, messages_line);
  ASSERT_EQ(got.size(), want.size()) << line;
  ASSERT_FALSE(want.empty());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(got[k].input_ids, want[k].input_ids) << line;
    EXPECT_EQ(got[k].labels, want[k].labels) << line;
  }
}

TEST(TextData, ShareGptLineEqualsItsMessagesLine) {
  std::string dir = tokenizer_dir("sharegpt", kChatMl);
  TextTokenizer t = TextTokenizer::load(dir);
  // A top-level system prompt, two exchanges; trained on both assistant turns.
  expect_same_samples(dir, t,
                      R"({"system":"be nice","conversations":[{"from":"human","value":"hello"},
                          {"from":"gpt","value":"hello world"},{"from":"human","value":"cat"},
                          {"from":"gpt","value":"world"}]})",
                      R"({"messages":[{"role":"system","content":"be nice"},{"role":"user","content":"hello"},
                          {"role":"assistant","content":"hello world"},{"role":"user","content":"cat"},
                          {"role":"assistant","content":"world"}]})");
  // Every accepted "from" value; an empty top-level system adds no message.
  expect_same_samples(dir, t,
                      R"({"system":"","conversations":[{"from":"system","value":"s"},{"from":"developer","value":"v"},
                          {"from":"user","value":"a"},
                          {"from":"model","value":"b"},{"from":"observation","value":"c"},
                          {"from":"assistant","value":"d"},{"from":"tool","value":"e"},
                          {"from":"function_response","value":"f"},{"from":"human","value":"g"},
                          {"from":"gpt","value":"h"}]})",
                      R"({"messages":[{"role":"system","content":"s"},{"role":"developer","content":"v"},
                          {"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"tool","content":"c"},
                          {"role":"assistant","content":"d"},{"role":"tool","content":"e"},
                          {"role":"tool","content":"f"},{"role":"user","content":"g"},
                          {"role":"assistant","content":"h"}]})");
  // Dumps that write role/content inside "conversations".
  expect_same_samples(dir, t,
                      R"({"conversations":[{"role":"human","content":"hello"},{"role":"assistant","content":"cat"}]})",
                      R"({"messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"cat"}]})");
  // Not vacuous: only the assistant turns are trained.
  auto samples = samples_of_line(
      dir, t, R"({"conversations":[{"from":"human","value":"hello"},{"from":"gpt","value":"world"}]})");
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(split_by_label(samples[0], t.tokenizer).first, "world<|im_end|>");
}

// ChatML with tools in the system turn and tool calls after the content, as Qwen2.5 renders them.
const char* kToolChat =
    "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content %}{{ m.content }}{% endif %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

TEST(TextData, ShareGptFunctionCallEqualsAToolCallsMessage) {
  std::string dir = tokenizer_dir("sharegpt_tools", kToolChat);
  TextTokenizer t = TextTokenizer::load(dir);
  const std::string tool = R"({"name":"weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}})";
  const std::string messages =
      R"({"messages":[{"role":"user","content":"hello"},
          {"role":"assistant","tool_calls":[{"type":"function","function":{"name":"weather","arguments":{"city":"cat"}}}]},
          {"role":"tool","content":"world"},{"role":"assistant","content":"hello world"}],"tools":[)" + tool + "]}";
  // "tools" as LLaMA-Factory writes it (a JSON string) and as a list.
  Json tools_string = Json("[" + tool + "]");
  for (const std::string& tools : {tools_string.dump(), "[" + tool + "]"}) {
    expect_same_samples(dir, t,
                        R"({"conversations":[{"from":"human","value":"hello"},
                            {"from":"function_call","value":"{\"name\": \"weather\", \"arguments\": {\"city\": \"cat\"}}"},
                            {"from":"observation","value":"world"},{"from":"gpt","value":"hello world"}],"tools":)" +
                            tools + "}",
                        messages);
  }
  // The call is rendered and trained, the tool result is not.
  auto samples = samples_of_line(dir, t, messages);
  ASSERT_EQ(samples.size(), 1u);
  auto [trained, rest] = split_by_label(samples[0], t.tokenizer);
  EXPECT_EQ(trained, R"(<tool_call>{"name": "weather", "arguments": {"city": "cat"}}</tool_call><|im_end|>)"
                     "hello world<|im_end|>");
  EXPECT_NE(rest.find("\"weather\""), std::string::npos) << rest;  // the tools' schema
  EXPECT_NE(rest.find("<|im_start|>tool\nworld<|im_end|>"), std::string::npos) << rest;
}

TEST(TextData, AlpacaLineEqualsItsMessagesLine) {
  std::string dir = tokenizer_dir("alpaca", kChatMl);
  TextTokenizer t = TextTokenizer::load(dir);
  // With input: the user turn is instruction + "\n" + input.
  expect_same_samples(dir, t, R"({"instruction":"hello","input":"cat","output":"world"})",
                      R"({"messages":[{"role":"user","content":"hello\ncat"},{"role":"assistant","content":"world"}]})");
  // Without input (empty, null or absent): the instruction alone.
  for (const char* line : {R"({"instruction":"hello","input":"","output":"world"})",
                           R"({"instruction":"hello","input":null,"output":"world"})",
                           R"({"instruction":"hello","output":"world"})"})
    expect_same_samples(dir, t, line,
                        R"({"messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"world"}]})");
  // With history and a system prompt: history pairs are earlier (trained) turns.
  expect_same_samples(dir, t,
                      R"({"system":"be nice","history":[["hello","world"],["cat","hello world"]],
                          "instruction":"hello","input":"world","output":"cat"})",
                      R"({"messages":[{"role":"system","content":"be nice"},{"role":"user","content":"hello"},
                          {"role":"assistant","content":"world"},{"role":"user","content":"cat"},
                          {"role":"assistant","content":"hello world"},{"role":"user","content":"hello\nworld"},
                          {"role":"assistant","content":"cat"}]})");
  auto samples = samples_of_line(
      dir, t, R"({"system":"be nice","history":[["hello","world"]],"instruction":"cat","output":"hello"})");
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(split_by_label(samples[0], t.tokenizer).first, "world<|im_end|>hello<|im_end|>");
}

TEST(TextData, ShareGptAndAlpacaErrorsNameLineAndTurnOrKey) {
  std::string dir = tokenizer_dir("forms_bad", kChatMl);
  TextTokenizer t = TextTokenizer::load(dir);
  const std::string good = R"({"instruction":"hello","output":"world"})";
  struct Case {
    std::string line, expect;
  };
  std::vector<Case> cases = {
      {R"({"conversations":[{"from":"human","value":"hi"},{"from":"bot","value":"x"}]})",
       "conversations[1] has unknown \"from\" 'bot' (expected human, user, gpt, assistant, model, system, "
       "developer, tool, observation, function_response, or function_call)"},
      {R"({"conversations":[{"role":"wizard","content":"hi"},{"role":"gpt","content":"x"}]})",
       "conversations[0] has unknown \"role\" 'wizard'"},
      {R"({"conversations":[{"from":"human","value":1},{"from":"gpt","value":"x"}]})",
       "conversations[0] (\"from\": \"human\") has no string \"value\""},
      {R"({"conversations":[{"value":"hi"},{"from":"gpt","value":"x"}]})",
       "conversations[0] has no string \"from\""},
      {R"({"conversations":[{"from":"human","value":"hi"},"x"]})", "conversations[1] is not an object"},
      {R"({"conversations":[{"from":"human","value":"hi"},{"from":"gpt","value":""}]})",
       "conversations[1] is an empty gpt turn"},
      {R"J({"conversations":[{"from":"human","value":"hi"},{"from":"function_call","value":"weather(1)"}]})J",
       "conversations[1] (function_call): \"value\" is not JSON"},
      {R"({"conversations":[{"from":"human","value":"hi"},{"from":"function_call","value":"{\"name\":\"f\"}"}]})",
       "conversations[1] (function_call): expected a JSON string {\"name\""},
      {R"({"conversations":[{"from":"human","value":"hi"}]})", "no assistant turn"},
      {R"({"conversations":{"from":"human"}})", "\"conversations\" must be a non-empty list"},
      {R"({"conversations":[{"from":"human","value":"hi"},{"from":"gpt","value":"x"}],"system":1})",
       "\"system\" must be a string"},
      {R"({"conversations":[{"from":"human","value":"hi"},{"from":"gpt","value":"x"}],"tools":"[x"})",
       "\"tools\" is a string that is not JSON"},
      {R"({"conversations":[{"from":"human","value":"hi"},{"from":"gpt","value":"x"}],"tools":{"name":"f"}})",
       "\"tools\" must be a list"},
      {R"({"instruction":["hi"],"output":"x"})", "\"instruction\" must be a string, got array"},
      {R"({"instruction":"hi"})", "\"output\" is missing"},
      {R"({"output":"x"})", "\"instruction\" is missing"},
      {R"({"instruction":"hi","output":""})", "\"output\" is empty"},
      {R"({"instruction":"hi","input":2,"output":"x"})", "\"input\" must be a string"},
      {R"({"instruction":"hi","system":false,"output":"x"})", "\"system\" must be a string"},
      {R"({"instruction":"hi","output":"x","history":"hello"})", "\"history\" must be a list"},
      {R"({"instruction":"hi","output":"x","history":[["a","b"],["a"]]})",
       "\"history\"[1] must be a [question, answer] pair of strings"},
      {R"({"instruction":"hi","output":"x","history":[["a",""]]})", "\"history\"[0] has an empty answer"},
      {R"({"question":"a"})",
       "expected \"messages\" (OpenAI chat), \"conversations\" (ShareGPT), \"instruction\" and \"output\" (Alpaca), "
       "\"prompt\" and \"completion\", or \"text\""},
      {R"({"input_ids":[1,2]})", "a pre-tokenized line"},
  };
  for (const auto& c : cases) {
    expect_bad_second_line(dir, t, good, c.line, c.expect);
  }
  // Without a chat template, both forms say they need one.
  for (const char* line : {R"({"conversations":[{"from":"human","value":"hi"},{"from":"gpt","value":"x"}]})",
                           R"({"instruction":"hi","output":"x"})"}) {
    std::string path = write_lines(dir, {line});
    std::string e = error_message([&] { read_text_jsonl(path, t.tokenizer, nullptr, t.eos_id, {}, nullptr); });
    EXPECT_NE(e.find("data.jsonl:1: "), std::string::npos) << e;
    EXPECT_NE(e.find("needs the model's chat template"), std::string::npos) << e;
  }
}

// ---------------------------------------------------------------------------------------
// Trained spans of published chat templates (tests/reference/template_fixtures/published),
// rendered with the fixture tokenizer plus each format's special tokens as added tokens.

const std::string kPublishedTemplates = std::string(GLINT_TEST_DATA_DIR) + "/../reference/template_fixtures/published";

// A tokenizer directory with `chat_template` as its chat_template.jinja and `specials`
// added to the fixture tokenizer as special tokens.
std::string special_tokenizer_dir(const std::string& chat_template, const std::vector<std::string>& specials) {
  std::string d = testing::fresh_temp_dir("text_published");
  Json tok = Json::parse(read_file(kTokenizerJson));
  int next_id = 0;
  for (const auto& t : tok["added_tokens"]) next_id = std::max(next_id, t["id"].get<int>() + 1);
  for (const std::string& s : specials)
    tok["added_tokens"].push_back({{"id", next_id++}, {"content", s}, {"single_word", false}, {"lstrip", false},
                                   {"rstrip", false}, {"normalized", false}, {"special", true}});
  std::ofstream(d + "/tokenizer.json") << tok.dump(1);
  std::ofstream(d + "/chat_template.jinja", std::ios::binary) << chat_template;
  std::ofstream(d + "/tokenizer_config.json") << Json::object().dump();
  return d;
}

// The same with the published template `file`.
std::string published_tokenizer_dir(const std::string& file, const std::vector<std::string>& specials) {
  return special_tokenizer_dir(read_file(kPublishedTemplates + "/" + file), specials);
}

const std::vector<std::string> kGptOssSpecials = {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>",
                                                  "<|return|>"};

// The model's stop tokens named by their text in t's tokenizer.
ChatDataOptions stopping_at(const TextTokenizer& t, const std::vector<std::string>& tokens) {
  ChatDataOptions o;
  for (const std::string& s : tokens) {
    o.stop_ids.push_back(t.tokenizer.token_to_id(s));
    EXPECT_GE(o.stop_ids.back(), 0) << s;
  }
  return o;
}

// gpt-oss (harmony): each assistant turn is trained with its analysis channel, its final
// channel up to <|return|>, or its tool call up to <|call|>. The template renders a
// conversation's earlier turns differently once later turns follow (a final answer's
// analysis is dropped, and so is a tool call's once a final answer follows it), so each
// turn is its own sample: the prompt the model writes it from, then the turn.
TEST(TextData, GptOssTrainsEachTurnWithItsAnalysisAfterThePromptItIsWrittenFrom) {
  TextTokenizer t = TextTokenizer::load(published_tokenizer_dir("gpt-oss.jinja", kGptOssSpecials));
  Json messages = Json::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"},
      {"role":"assistant","content":"","thinking":"Need the weather tool.","tool_calls":[{"type":"function",
        "function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
      {"role":"tool","content":"sunny"},{"role":"assistant","content":"Sunny in Paris.","thinking":"It is sunny."},
      {"role":"user","content":"Thanks!"},{"role":"assistant","content":"You're welcome.","thinking":"Be polite."}])");
  // gpt-oss's stop tokens (generation_config.json: <|return|>, <|call|>) end the turns
  // themselves: nothing after a turn is trained.
  ChatDataOptions o = stopping_at(t, {"<|return|>", "<|call|>"});
  o.render.now = 1749988800;  // strftime_now: 2025-06-15 (12:00 UTC)
  auto samples = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, o);
  ASSERT_EQ(samples.size(), 3u);
  const std::string head =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: 2025-06-15\n\nReasoning: medium\n\n"
      "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
      "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
      "<|start|>user<|message|>Weather in Paris?<|end|>";
  const std::string call =
      "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>";
  const std::string result = "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"sunny\"<|end|>";
  // The tool call: its analysis and the call.
  auto [trained0, rest0] = split_by_label(samples[0], t.tokenizer);
  EXPECT_EQ(trained0, "<|channel|>analysis<|message|>Need the weather tool.<|end|>" + call);
  EXPECT_EQ(rest0, head + "<|start|>assistant");
  // The answer after the tool result, written from a prompt that still holds the tool
  // call's analysis (the render through the answer drops it).
  auto [trained1, rest1] = split_by_label(samples[1], t.tokenizer);
  EXPECT_EQ(trained1, "<|channel|>analysis<|message|>It is sunny.<|end|>"
                      "<|start|>assistant<|channel|>final<|message|>Sunny in Paris.<|return|>");
  EXPECT_EQ(rest1, head + "<|start|>assistant<|channel|>analysis<|message|>Need the weather tool.<|end|>" + call +
                       result + "<|start|>assistant");
  // The last answer: the earlier turns without their analysis, the first answer ending in
  // <|end|>.
  auto [trained2, rest2] = split_by_label(samples[2], t.tokenizer);
  EXPECT_EQ(trained2, "<|channel|>analysis<|message|>Be polite.<|end|>"
                      "<|start|>assistant<|channel|>final<|message|>You're welcome.<|return|>");
  EXPECT_EQ(rest2, head + call + result + "<|start|>assistant<|channel|>final<|message|>Sunny in Paris.<|end|>"
                       "<|start|>user<|message|>Thanks!<|end|><|start|>assistant");
}

// GLM-4.5: a turn is "\n<think>reasoning</think>\n" and its content or tool call after the
// <|assistant|> generation prompt. The template keeps reasoning only after the last user
// message, so each turn is its own sample. GLM has no end-of-turn token: the model stops
// by writing the role token that opens the next message (<|user|>, <|observation|>), which
// the release lists among its stop tokens (generation_config.json's eos_token_id). Each
// turn trains the one rendered after it; the last turn the <|user|> a next user message
// opens with.
const std::vector<std::string> kGlmSpecials = {
    "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<think>", "</think>",
    "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<tool_response>",
    "</tool_response>"};

TEST(TextData, Glm45TrainsEachTurnWithItsReasoningAndTheRoleTokenThatStopsIt) {
  TextTokenizer t = TextTokenizer::load(published_tokenizer_dir("glm-4.5.jinja", kGlmSpecials));
  Json messages = Json::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"},
      {"role":"assistant","content":"","reasoning_content":"Need the tool.","tool_calls":[{"type":"function",
        "function":{"name":"get_weather","arguments":{"city":"Paris","days":2}}}]},
      {"role":"tool","content":"sunny"},{"role":"assistant","content":"Sunny.","reasoning_content":"It is sunny."},
      {"role":"user","content":"Thanks!"},{"role":"assistant","content":"You're welcome.","reasoning_content":"Be polite."}])");
  auto samples = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, stopping_at(t, {"<|user|>", "<|observation|>"}));
  ASSERT_EQ(samples.size(), 3u);
  const std::string head = "[gMASK]<sop><|system|>\nBe brief.<|user|>Weather in Paris?<|assistant|>";
  const std::string call = "\n<tool_call>get_weather<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>"
                           "<arg_key>days</arg_key>\n<arg_value>2</arg_value></tool_call>";
  const std::string result = "<|observation|>\n<tool_response>\nsunny\n</tool_response><|assistant|>";
  // The tool call stops at the <|observation|> its result opens with.
  auto [trained0, rest0] = split_by_label(samples[0], t.tokenizer);
  EXPECT_EQ(trained0, "\n<think>Need the tool.</think>" + call + "<|observation|>");
  EXPECT_EQ(rest0, head);
  EXPECT_EQ(samples[0].input_ids.back(), t.tokenizer.token_to_id("<|observation|>"));
  // The answer stops at the next user message's <|user|> (the render through that message
  // drops the answer's reasoning; the sample keeps it, as the model wrote it).
  auto [trained1, rest1] = split_by_label(samples[1], t.tokenizer);
  EXPECT_EQ(trained1, "\n<think>It is sunny.</think>\nSunny.<|user|>");
  EXPECT_EQ(rest1, head + "\n<think>Need the tool.</think>" + call + result);
  // After the second user message the earlier turns keep an empty <think></think>. The
  // last turn stops at the <|user|> a next message would open with.
  auto [trained2, rest2] = split_by_label(samples[2], t.tokenizer);
  EXPECT_EQ(trained2, "\n<think>Be polite.</think>\nYou're welcome.<|user|>");
  EXPECT_EQ(rest2, head + "\n<think></think>" + call + result + "\n<think></think>\nSunny.<|user|>Thanks!<|assistant|>");
  EXPECT_EQ(samples[2].labels.back(), t.tokenizer.token_to_id("<|user|>"));
  // A model directory that names no stop token trains no role token.
  auto bare = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, {});
  ASSERT_EQ(bare.size(), 3u);
  EXPECT_EQ(split_by_label(bare[1], t.tokenizer).first, "\n<think>It is sunny.</think>\nSunny.");
  EXPECT_EQ(split_by_label(bare[2], t.tokenizer).first, "\n<think>Be polite.</think>\nYou're welcome.");
}

// GLM-4.6 renders turns as GLM-4.5 does: the same stop tokens trained.
TEST(TextData, Glm46TrainsTheRoleTokenThatStopsEachTurn) {
  TextTokenizer t = TextTokenizer::load(published_tokenizer_dir("glm-4.6.jinja", kGlmSpecials));
  Json messages = Json::parse(R"([{"role":"user","content":"Hi"},
      {"role":"assistant","content":"Hello.","reasoning_content":"Greet."},{"role":"user","content":"Bye"},{"role":"assistant","content":"Bye.","reasoning_content":"Part."}])");
  auto samples = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, stopping_at(t, {"<|user|>", "<|observation|>"}));
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(split_by_label(samples[0], t.tokenizer).first, "\n<think>Greet.</think>\nHello.<|user|>");
  EXPECT_EQ(split_by_label(samples[1], t.tokenizer).first, "\n<think>Part.</think>\nBye.<|user|>");
}

// A template without end-of-turn tokens that renders every turn the same whatever follows:
// one sample, each turn trained through the role token after it, the last turn's added.
TEST(TextData, StopTokenAfterEachTurnOfAOneSampleConversation) {
  const std::string tmpl = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
                           "{% if add_generation_prompt %}<|assistant|>{% endif %}";
  TextTokenizer t = TextTokenizer::load(special_tokenizer_dir(tmpl, {"<|user|>", "<|assistant|>", "<|tool|>"}));
  Json messages = Json::parse(R"([{"role":"user","content":"hello"},{"role":"assistant","content":"world"},
      {"role":"tool","content":"cat"},{"role":"assistant","content":"hello world"}])");
  auto samples = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, stopping_at(t, {"<|user|>", "<|tool|>"}));
  ASSERT_EQ(samples.size(), 1u);
  auto [trained, rest] = split_by_label(samples[0], t.tokenizer);
  EXPECT_EQ(trained, "world<|tool|>hello world<|user|>");
  EXPECT_EQ(rest, "<|user|>hello<|assistant|>cat<|assistant|>");
}

// gpt-oss's harmony has a developer role: a first developer message is rendered as the
// developer block ("# Instructions"), as a system message is, and is not trained.
TEST(TextData, DeveloperMessageIsRenderedByTheTemplateAndNotTrained) {
  TextTokenizer t = TextTokenizer::load(published_tokenizer_dir("gpt-oss.jinja", kGptOssSpecials));
  Json messages = Json::parse(R"([{"role":"developer","content":"Answer in French."},{"role":"user","content":"Hi"},
      {"role":"assistant","content":"Bonjour."}])");
  ChatDataOptions o;
  o.render.now = 1749988800;
  auto samples = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, o);
  ASSERT_EQ(samples.size(), 1u);
  auto [trained, rest] = split_by_label(samples[0], t.tokenizer);
  EXPECT_EQ(trained, "<|channel|>final<|message|>Bonjour.<|return|>");
  EXPECT_NE(rest.find("<|start|>developer<|message|># Instructions\n\nAnswer in French.\n\n<|end|>"
                      "<|start|>user<|message|>Hi<|end|><|start|>assistant"),
            std::string::npos)
      << rest;
  // Through a data file too; a role no chat format has is still refused, naming the line.
  std::string dir = testing::fresh_temp_dir("text_developer");
  std::string path = write_lines(
      dir, {Json({{"messages", messages}}).dump(),
            R"({"messages":[{"role":"narrator","content":"x"},{"role":"assistant","content":"y"}]})"});
  TextDataOptions data;
  std::string e = error_message([&] { read_text_jsonl(path, t.tokenizer, &*t.chat, t.eos_id, data, nullptr); });
  EXPECT_NE(e.find("data.jsonl:2: message 0 has unknown role 'narrator'"), std::string::npos) << e;
  data.max_bad_lines = 1;
  EXPECT_EQ(read_text_jsonl(path, t.tokenizer, &*t.chat, t.eos_id, data, nullptr).size(), 1u);
}

// --chat-date: the date strftime_now() renders (gpt-oss's "Current date"), the same in
// every render and in every time zone; anything but a real YYYY-MM-DD day is refused,
// naming the flag and the value.
TEST(TextData, ChatDateFixesTheDateTemplatesRender) {
  TextTokenizer t = TextTokenizer::load(published_tokenizer_dir("gpt-oss.jinja", kGptOssSpecials));
  Json messages = Json::parse(R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello."}])");
  auto text_of = [&](const Sample& s) {
    std::string out;
    for (int64_t id : s.input_ids) out += t.tokenizer.token_bytes(int32_t(id));
    return out;
  };
  const char* saved = std::getenv("TZ");
  const std::string saved_tz = saved ? saved : "";
  // UTC, UTC+14 and UTC-12 (POSIX zone strings: no tzdata needed).
  for (const char* tz : {"UTC0", "XST-14", "YST12"}) {
    setenv("TZ", tz, 1);
    tzset();
    TextDataOptions o;
    o.set_chat_date("2024-02-29");
    auto first = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, o.chat);
    auto second = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, o.chat);
    ASSERT_EQ(first.size(), 1u);
    ASSERT_EQ(second.size(), 1u);
    EXPECT_EQ(first[0].input_ids, second[0].input_ids) << tz;
    EXPECT_NE(text_of(first[0]).find("Current date: 2024-02-29\n"), std::string::npos)
        << tz << ": " << text_of(first[0]);
  }
  if (saved) {
    setenv("TZ", saved_tz.c_str(), 1);
  } else {
    unsetenv("TZ");
  }
  tzset();
  for (const char* bad : {"2025-02-29", "2024-02-30", "2024-13-01", "2024-00-10", "2024-04-31", "2024-2-29",
                          "29-02-2024", "2024/02/29", "2024-02-29T12:00", " 2024-02-29", "today", "0000-01-01"}) {
    TextDataOptions o;
    std::string e = error_message([&] { o.set_chat_date(bad); });
    EXPECT_NE(e.find("--chat-date must be a day written YYYY-MM-DD"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find(std::string("'") + bad + "'"), std::string::npos) << bad << ": " << e;
    EXPECT_THROW(o.set_chat_date(bad), UsageError) << bad;
    EXPECT_FALSE(o.chat.render.now.has_value()) << bad;
  }
  TextDataOptions unset;
  unset.set_chat_date("");
  EXPECT_FALSE(unset.chat.render.now.has_value());
}

// Kimi-K2: a tiktoken.model directory (no tokenizer.json) with the published template.
// Each assistant turn is trained with the <|im_end|> that ends it (the release's stop
// token); the system turn the template adds, the role headers and user turns are not.
TEST(TextData, KimiK2TiktokenDirectoryTrainsAssistantTurnsThroughImEnd) {
  std::string d = testing::fresh_temp_dir("text_kimi");
  {
    static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::ofstream m(d + "/tiktoken.model", std::ios::binary);
    for (int b = 0; b < 256; ++b) m << abc[b >> 2] << abc[(b & 3) << 4] << "== " << b << "\n";  // one byte each
    m << "SGk= 256\n"   // "Hi"
      << "dXNlcg== 257\n";  // "user"
  }
  const std::vector<std::string> names = {"[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>",
                                          "<|im_system|>", "<|im_middle|>"};
  Json decoder = Json::object();
  for (size_t i = 0; i < names.size(); ++i)
    decoder[std::to_string(258 + i)] = {{"content", names[i]}, {"special", true}};
  std::ofstream(d + "/tokenizer_config.json") << Json{{"added_tokens_decoder", decoder}, {"eos_token", "[EOS]"}}.dump();
  std::ofstream(d + "/chat_template.jinja", std::ios::binary) << read_file(kPublishedTemplates + "/kimi-k2.jinja");
  TextTokenizer t = TextTokenizer::load(d);
  ASSERT_TRUE(t.chat.has_value());
  EXPECT_EQ(t.tokenizer.token_to_id("<|im_end|>"), 260);
  EXPECT_EQ(t.eos_id, 259);
  Json messages = Json::parse(R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello, 世界!"},
      {"role":"user","content":"Bye"},{"role":"assistant","content":"Bye."}])");
  auto samples = tokenize_chat(messages, Json(), t.tokenizer, *t.chat, stopping_at(t, {"<|im_end|>"}));
  ASSERT_EQ(samples.size(), 1u);
  auto [trained, rest] = split_by_label(samples[0], t.tokenizer);
  EXPECT_EQ(trained, "Hello, 世界!<|im_end|>Bye.<|im_end|>");
  EXPECT_EQ(rest, "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>"
                  "<|im_user|>user<|im_middle|>Hi<|im_end|><|im_assistant|>assistant<|im_middle|>"
                  "<|im_user|>user<|im_middle|>Bye<|im_end|><|im_assistant|>assistant<|im_middle|>");
  // The special tokens are single ids; "Hi" and "user" their tokens.
  EXPECT_EQ(samples[0].input_ids.front(), t.tokenizer.token_to_id("<|im_system|>"));
  EXPECT_EQ(t.tokenizer.encode("<|im_user|>user<|im_middle|>Hi"), (std::vector<int32_t>{261, 257, 264, 256}));
}

}  // namespace
}  // namespace glint
