#include "data/text_dataset.h"

#include <algorithm>
#include <atomic>
#include <ctime>
#include <exception>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cpu_threads.h"
#include "core/error.h"
#include "data/lengths.h"

namespace glint {

namespace {

using Json = nlohmann::ordered_json;

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// Token ids of `text` with labels on the tokens that overlap one of `spans` (byte ranges
// [begin, end) of text): a token straddling a prompt/completion boundary is trained. Byte-level tokens spell their bytes exactly, so a token's
// byte offset is the sum of the lengths before it. Special tokens that the
// post-processor adds (add_special_tokens) are not trained.
Sample label_spans(const std::string& text, const std::vector<std::pair<size_t, size_t>>& spans,
                   const Tokenizer& tok, bool add_special_tokens) {
  std::vector<int32_t> bare = tok.encode(text, false);
  std::vector<int64_t> labels(bare.size(), kIgnoreIndex);
  size_t offset = 0;
  for (size_t i = 0; i < bare.size(); ++i) {
    size_t start = offset;
    offset += tok.token_bytes(bare[i]).size();
    for (const auto& [b, e] : spans)
      if (start < e && offset > b) labels[i] = bare[i];
  }
  GLINT_CHECK(offset == text.size(), "the tokens of a text do not spell it byte for byte (", offset, " vs ",
              text.size(), " bytes): the tokenizer's normalizer changed it");
  Sample s;
  std::vector<int32_t> ids = add_special_tokens ? tok.encode(text, true) : bare;
  size_t lead = 0;  // where the text's own tokens start among ids
  while (lead + bare.size() <= ids.size() && !std::equal(bare.begin(), bare.end(), ids.begin() + lead)) ++lead;
  GLINT_CHECK(lead + bare.size() <= ids.size(), "the tokenizer's post-processor changed the text's own tokens");
  s.input_ids.assign(ids.begin(), ids.end());
  s.labels.assign(ids.size(), kIgnoreIndex);
  std::copy(labels.begin(), labels.end(), s.labels.begin() + lead);
  return s;
}

// The end of a turn's span: its render without trailing whitespace (the newline after an
// end-of-turn token belongs to no turn).
size_t trim_end(const std::string& s, size_t begin, size_t end) {
  while (end > begin && (s[end - 1] == '\n' || s[end - 1] == ' ' || s[end - 1] == '\r' || s[end - 1] == '\t'))
    --end;
  return end;
}

// Where an assistant turn's own text starts in `upto` (the render through the turn) when
// `upto` does not continue `prompt` (the render before the turn, with the generation
// prompt): the template renders the earlier messages differently once the turn follows
// (gpt-oss drops the analysis of earlier tool calls once a final answer follows, but
// keeps it in the prompt the answer is generated from). The turn starts where the longest
// tail of `prompt` ends in `upto`; that tail must hold at least the generation prompt (its
// `gen` last bytes) and be the only one of its length. npos when there is no such place.
size_t turn_start(const std::string& prompt, const std::string& upto, size_t gen) {
  // k(p), the longest tail of `prompt` that ends at upto[p - 1], for every p at once: the
  // Z-function of reversed prompt + reversed upto (linear; a loop per p is quadratic on
  // repetitive text), capped at the prompt's length.
  std::string s(prompt.rbegin(), prompt.rend());
  s.append(upto.rbegin(), upto.rend());
  const size_t n = s.size(), P = prompt.size();
  std::vector<size_t> z(n, 0);
  for (size_t i = 1, l = 0, r = 0; i < n; ++i) {
    if (i < r) z[i] = std::min(r - i, z[i - l]);
    while (i + z[i] < n && s[z[i]] == s[i + z[i]]) ++z[i];
    if (i + z[i] > r) l = i, r = i + z[i];
  }
  size_t best = std::string::npos, best_len = 0;
  bool tie = false;
  for (size_t p = 1; p <= upto.size(); ++p) {
    const size_t q = P + (upto.size() - p);  // upto[p - 1] in s
    const size_t k = std::min({q == 0 ? n : z[q], P, p});
    if (k < std::max<size_t>(gen, 1) || k < best_len) continue;
    tie = k == best_len;
    best = p;
    best_len = k;
  }
  return tie ? std::string::npos : best;
}

void check_messages(const Json& messages) {
  GLINT_CHECK(messages.is_array() && !messages.empty(), "\"messages\" must be a non-empty list");
  bool any_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    GLINT_CHECK(m.is_object(), "message ", i, " is not an object");
    GLINT_CHECK(m.contains("role") && m["role"].is_string(), "message ", i, " has no string \"role\"");
    std::string role = m["role"].get<std::string>();
    GLINT_CHECK(role == "system" || role == "developer" || role == "user" || role == "assistant" || role == "tool",
                "message ", i, " has unknown role '", role, "' (expected system, developer, user, assistant or tool)");
    if (role != "assistant") continue;
    any_assistant = true;
    bool has_content = m.contains("content") && m["content"].is_string() && !m["content"].get<std::string>().empty();
    bool has_calls = m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
    GLINT_CHECK(has_content || has_calls, "message ", i, " is an empty assistant turn (no content, no tool_calls)");
  }
  GLINT_CHECK(any_assistant, "the conversation has no assistant turn to train on");
}

// A JSON value shortened for an error message.
std::string brief(const Json& v) {
  std::string s = v.dump();
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

// An optional key: null when absent or null (dumps of tables write null for a missing
// column), else the value.
const Json* optional_key(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// An optional string key: "" when absent, null or empty; any other type is an error naming it.
std::string optional_string(const Json& j, const char* key) {
  const Json* v = optional_key(j, key);
  if (!v) return "";
  GLINT_CHECK(v->is_string(), "\"", key, "\" must be a string, got ", v->type_name(), " ", brief(*v));
  return v->get<std::string>();
}

// A required string key of a `form` line ("Alpaca"); an error naming the key otherwise.
std::string required_string(const Json& j, const char* key, const char* form) {
  auto it = j.find(key);
  GLINT_CHECK(it != j.end(), "\"", key, "\" is missing (", form, " lines need it)");
  GLINT_CHECK(it->is_string(), "\"", key, "\" must be a string, got ", it->type_name(), " ", brief(*it));
  return it->get<std::string>();
}

Json message(const char* role, const std::string& content) {
  Json m = Json::object();
  m["role"] = role;
  m["content"] = content;
  return m;
}

// ShareGPT's "from" values (and the "role" values of dumps that use role/content) and
// the OpenAI role each becomes; function_call turns are handled apart.
const std::pair<const char*, const char*> kShareGptRoles[] = {
    {"human", "user"},         {"user", "user"},          {"gpt", "assistant"},
    {"assistant", "assistant"}, {"model", "assistant"},     {"system", "system"},
    {"developer", "developer"}, {"tool", "tool"},           {"observation", "tool"},
    {"function_response", "tool"},
};

// A function_call turn's value, a JSON string {"name": ..., "arguments": ...} (or a list
// of them, LLaMA-Factory's parallel calls) -> OpenAI tool_calls entries
// {"type": "function", "function": {"name", "arguments"}}; arguments kept as given.
Json tool_calls_of(const std::string& value, const std::string& where) {
  const char* expected = "expected a JSON string {\"name\": \"...\", \"arguments\": {...}}";
  Json parsed;
  try {
    parsed = Json::parse(value);
  } catch (const Json::exception&) {
    fail(where, " (function_call): \"value\" is not JSON: ", expected, ", got ", brief(Json(value)));
  }
  Json calls = Json::array();
  for (const Json& c : parsed.is_array() ? parsed : Json::array({parsed})) {
    GLINT_CHECK(c.is_object() && c.contains("name") && c["name"].is_string() && c.contains("arguments"), where,
                " (function_call): ", expected, ", got ", brief(c));
    Json fn = Json::object();
    fn["name"] = c["name"];
    fn["arguments"] = c["arguments"];
    Json call = Json::object();
    call["type"] = "function";
    call["function"] = std::move(fn);
    calls.push_back(std::move(call));
  }
  GLINT_CHECK(!calls.empty(), where, " (function_call): ", expected, ", got []");
  return calls;
}

}  // namespace

ChatLine sharegpt_to_chat(const Json& line) {
  ChatLine out;
  out.messages = Json::array();
  const Json* turns = optional_key(line, "conversations");
  GLINT_CHECK(turns && turns->is_array() && !turns->empty(), "\"conversations\" must be a non-empty list, got ",
              turns ? brief(*turns) : std::string("null"));
  std::string system = optional_string(line, "system");
  if (!system.empty()) out.messages.push_back(message("system", system));
  if (const Json* tools = optional_key(line, "tools")) {
    // LLaMA-Factory stores the tool list as a JSON string; a list is taken as it is.
    out.tools = *tools;
    if (tools->is_string()) {
      try {
        out.tools = tools->get<std::string>().empty() ? Json() : Json::parse(tools->get<std::string>());
      } catch (const Json::exception&) {
        fail("\"tools\" is a string that is not JSON: ", brief(*tools));
      }
    }
    GLINT_CHECK(out.tools.is_null() || out.tools.is_array(),
                "\"tools\" must be a list of tool schemas (or a string holding one as JSON), got ", brief(*tools));
  }
  for (size_t i = 0; i < turns->size(); ++i) {
    const Json& t = (*turns)[i];
    const std::string where = "conversations[" + std::to_string(i) + "]";
    GLINT_CHECK(t.is_object(), where, " is not an object: ", brief(t));
    // {"from", "value"} as ShareGPT writes turns, or {"role", "content"} as some dumps do.
    const char* role_key = t.contains("from") ? "from" : "role";
    const char* content_key = t.contains("value") ? "value" : "content";
    GLINT_CHECK(t.contains(role_key) && t[role_key].is_string(), where, " has no string \"from\" (or \"role\")");
    GLINT_CHECK(t.contains(content_key) && t[content_key].is_string(), where, " (\"", role_key, "\": ",
                t[role_key].dump(), ") has no string \"value\" (or \"content\"), got ",
                t.contains(content_key) ? brief(t[content_key]) : std::string("none"));
    const std::string from = t[role_key].get<std::string>(), value = t[content_key].get<std::string>();
    if (from == "function_call") {
      Json m = Json::object();
      m["role"] = "assistant";
      m["tool_calls"] = tool_calls_of(value, where);
      out.messages.push_back(std::move(m));
      continue;
    }
    const char* role = nullptr;
    for (const auto& [name, mapped] : kShareGptRoles)
      if (from == name) role = mapped;
    if (!role) {
      std::string accepted;
      for (const auto& [name, mapped] : kShareGptRoles) accepted += std::string(name) + ", ";
      fail(where, " has unknown \"", role_key, "\" '", from, "' (expected ", accepted, "or function_call)");
    }
    GLINT_CHECK(std::string(role) != "assistant" || !value.empty(), where, " is an empty ", from,
                " turn: nothing to train on");
    out.messages.push_back(message(role, value));
  }
  return out;
}

ChatLine alpaca_to_chat(const Json& line) {
  ChatLine out;
  out.messages = Json::array();
  const std::string instruction = required_string(line, "instruction", "Alpaca");
  const std::string output = required_string(line, "output", "Alpaca");
  GLINT_CHECK(!output.empty(), "\"output\" is empty: nothing to train on");
  const std::string input = optional_string(line, "input");
  const std::string system = optional_string(line, "system");
  if (!system.empty()) out.messages.push_back(message("system", system));
  if (const Json* history = optional_key(line, "history")) {
    GLINT_CHECK(history->is_array(), "\"history\" must be a list of [question, answer] pairs, got ", brief(*history));
    for (size_t k = 0; k < history->size(); ++k) {
      const Json& pair = (*history)[k];
      GLINT_CHECK(pair.is_array() && pair.size() == 2 && pair[0].is_string() && pair[1].is_string(), "\"history\"[",
                  k, "] must be a [question, answer] pair of strings, got ", brief(pair));
      GLINT_CHECK(!pair[1].get<std::string>().empty(), "\"history\"[", k, "] has an empty answer");
      out.messages.push_back(message("user", pair[0].get<std::string>()));
      out.messages.push_back(message("assistant", pair[1].get<std::string>()));
    }
  }
  // The user turn is instruction + "\n" + input, leaving out an empty part: LLaMA-Factory's
  // convention for Alpaca data (its AlpacaDatasetConverter joins the non-empty ones with "\n").
  std::string user = instruction;
  if (!input.empty()) user += (user.empty() ? "" : "\n") + input;
  out.messages.push_back(message("user", user));
  out.messages.push_back(message("assistant", output));
  return out;
}

std::vector<Sample> tokenize_chat(const Json& messages, const Json& tools, const Tokenizer& tok,
                                  const ChatTemplate& tmpl, const ChatDataOptions& options) {
  check_messages(messages);
  ChatRenderOptions opt = options.render;
  opt.tools = tools;
  if (!opt.now) opt.now = static_cast<int64_t>(std::time(nullptr));  // one date for every render below
  auto render_list = [&](const Json& list, bool generation_prompt) {
    opt.add_generation_prompt = generation_prompt;
    return tmpl.render(list, opt);
  };
  auto head = [&](size_t n) {
    Json h = Json::array();
    for (size_t i = 0; i < n; ++i) h.push_back(messages[i]);
    return h;
  };
  auto render = [&](size_t n, bool generation_prompt) { return render_list(head(n), generation_prompt); };
  const std::string whole = render(messages.size(), false);
  // The stop token's text the template renders right after assistant message i, whose
  // render through it is `upto`; "" when what follows does not open with a stop token.
  // What follows is the next message's opening, or after the last message that of a user
  // message (a probe: a template that refuses it leaves the turn without a stop token).
  auto stop_after = [&](size_t i, const std::string& upto) -> std::string {
    if (options.stop_ids.empty()) return "";
    std::string after;
    if (starts_with(whole, upto) && whole.size() > upto.size()) {
      after = whole.substr(upto.size());
    } else {
      Json next = head(i + 1);
      next.push_back(i + 1 < messages.size() ? messages[i + 1] : message("user", "?"));
      std::string r;
      if (i + 1 < messages.size()) {
        r = render_list(next, false);
      } else {
        try {
          r = render_list(next, false);
        } catch (const Error&) {
          return "";
        }
      }
      // Where the turn ends in r: right after upto when r continues it, else after the
      // longest tail of upto found in r (the template rewrites the turn once a message
      // follows, as GLM drops its reasoning before a user message), a tail of at least
      // kMinTail bytes: a shorter one (an end token the template changes, as gpt-oss's
      // <|return|> becomes <|end|>) says nothing about where the turn ends.
      constexpr size_t kMinTail = 8;
      size_t end = starts_with(r, upto) ? upto.size() : turn_start(upto, r, std::min(kMinTail, upto.size()));
      if (end == std::string::npos) return "";
      after = r.substr(end);
    }
    std::string best;
    for (int64_t id : options.stop_ids) {
      if (id < 0 || id >= tok.vocab_size()) continue;
      const std::string& text = tok.token_bytes(int32_t(id));
      // The token's own text, tokenized alone, is that token (an added token is).
      if (text.size() > best.size() && starts_with(after, text) &&
          tok.encode(text, false) == std::vector<int32_t>{int32_t(id)})
        best = text;
    }
    return best;
  };
  struct Turn {
    std::string text;     // the render before the turn (with generation prompt), then the turn
    size_t begin;         // where the turn starts in text
    std::string stop;     // the stop token rendered right after the turn, trained with it ("": none)
    // Where the trained span ends in text + stop: through the stop token (and whatever
    // whitespace comes before it), else the turn without its trailing whitespace.
    size_t end() const { return stop.empty() ? trim_end(text, begin, text.size()) : text.size() + stop.size(); }
  };
  std::vector<Turn> turns;
  bool consistent = true;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    std::string prompt = i == 0 ? std::string() : render(i, true), upto = render(i + 1, false);
    size_t start = prompt.size();
    if (!starts_with(upto, prompt)) {
      const std::string before = render(i, false);
      start = turn_start(prompt, upto, starts_with(prompt, before) ? prompt.size() - before.size() : 0);
      GLINT_CHECK(start != std::string::npos, "the chat template renders assistant message ", i,
                  " in a way that does not continue its own generation prompt (and no tail of that prompt holding",
                  " the generation prompt comes before the turn in its render)");
      consistent = false;
    }
    consistent = consistent && starts_with(whole, upto);
    turns.push_back({prompt + upto.substr(start), prompt.size(), stop_after(i, upto)});
  }
  std::vector<Sample> out;
  if (consistent) {
    // Each turn's text is a prefix of the whole render, which holds the stop token after
    // every turn but one that ends it: that one is added.
    std::string text = whole;
    std::vector<std::pair<size_t, size_t>> spans;
    for (const Turn& t : turns) {
      if (!t.stop.empty() && t.text.size() == whole.size()) text += t.stop;
      spans.emplace_back(t.begin, t.end());
    }
    out.push_back(label_spans(text, spans, tok, false));
  } else {
    for (const Turn& t : turns) out.push_back(label_spans(t.text + t.stop, {{t.begin, t.end()}}, tok, false));
  }
  return out;
}

Sample tokenize_prompt_completion(const std::string& prompt, const std::string& completion, const Tokenizer& tok,
                                  int32_t eos_id) {
  GLINT_CHECK(!completion.empty(), "\"completion\" is empty: nothing to train on");
  std::string text = prompt + completion;
  Sample s = label_spans(text, {{prompt.size(), text.size()}}, tok, true);
  if (eos_id >= 0) {
    s.input_ids.push_back(eos_id);
    s.labels.push_back(eos_id);
  }
  return s;
}

void TextDataOptions::set_enable_thinking(const std::string& value) {
  if (value.empty()) return;
  GLINT_CHECK(value == "true" || value == "false", "--enable-thinking must be true or false, got '", value, "'");
  chat.render.extra["enable_thinking"] = value == "true";
}

void TextDataOptions::set_chat_date(const std::string& date) {
  if (date.empty()) return;
  chat.render.now = chat_date_clock(date);
}

int64_t chat_date_clock(const std::string& date) {
  auto digits = [&](size_t at, size_t n) {
    int v = 0;
    for (size_t k = at; k < at + n; ++k) {
      if (date[k] < '0' || date[k] > '9') return -1;
      v = v * 10 + (date[k] - '0');
    }
    return v;
  };
  const bool form = date.size() == 10 && date[4] == '-' && date[7] == '-';
  const int year = form ? digits(0, 4) : -1, month = form ? digits(5, 2) : -1, day = form ? digits(8, 2) : -1;
  std::tm t{};
  t.tm_year = year - 1900;
  t.tm_mon = month - 1;
  t.tm_mday = day;
  t.tm_hour = 12;  // noon: the same day in every format, whatever daylight saving does
  t.tm_isdst = -1;
  const bool parsed = year >= 1 && month >= 1 && month <= 12 && day >= 1 && day <= 31;
  const std::time_t clock = parsed ? std::mktime(&t) : std::time_t(-1);
  // mktime carries a day past the month's end into the next month (2025-02-30 -> March 2).
  GLINT_USAGE_CHECK(clock != std::time_t(-1) && t.tm_year == year - 1900 && t.tm_mon == month - 1 && t.tm_mday == day,
                    "--chat-date must be a day written YYYY-MM-DD (e.g. 2025-06-15), got '", date, "'");
  return static_cast<int64_t>(clock);
}

TextTokenizer TextTokenizer::load(const std::string& dir) {
  TextTokenizer t{Tokenizer::load(dir), std::nullopt};
  // A directory without a chat format still trains on text; a malformed template is an
  // error here, not a missing one.
  if (ChatTemplate::defined_in(dir)) t.chat = ChatTemplate::load(dir);
  std::map<std::string, std::string> special = ChatTemplate::special_tokens_in(dir);
  auto id_of = [&](const char* name) -> int32_t {
    auto it = special.find(name);
    return it == special.end() ? -1 : t.tokenizer.token_to_id(it->second);
  };
  t.eos_id = id_of("eos_token");
  t.pad_id = id_of("pad_token");
  if (t.pad_id < 0) t.pad_id = t.eos_id;
  return t;
}

bool is_pretokenized_jsonl(const std::string& path) {
  std::ifstream in(path);
  GLINT_CHECK(in, path, ": cannot open");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      Json j = Json::parse(line);
      return j.is_object() && j.contains("input_ids");
    } catch (const Json::exception&) {  // not JSON: the text reader reports it with its line
      return false;
    }
  }
  return false;
}

namespace {
// The error of a chat line without a chat template: it is the model's, not the line's.
constexpr const char* kNeedsTemplate = " needs the model's chat template (tokenizer_config.json)";

// A file that is one JSON document spread over lines, or a JSON array, rather than JSONL:
// every line would fail alone, so the file is refused as a whole, saying so.
void check_jsonl(const std::string& path, const std::vector<std::pair<int64_t, std::string>>& lines) {
  if (lines.empty()) return;
  const std::string& first = lines[0].second;
  const size_t at = first.find_first_not_of(" \t\r");
  const std::string trimmed = first.substr(at, first.find_last_not_of(" \t\r") + 1 - at);
  Json j = Json::parse(first, nullptr, /*allow_exceptions=*/false);
  const bool array = trimmed[0] == '[' && (j.is_discarded() || j.is_array());
  const bool spread = trimmed == "{" || (trimmed[0] == '{' && j.is_discarded() && lines.size() > 1 &&
                                         Json::parse(lines[1].second, nullptr, false).is_discarded());
  GLINT_CHECK(!array && !spread, path, " is ", array ? "a JSON array" : "one JSON document spread over lines",
              ", not JSONL: glint reads one JSON object per line", array ? " (convert it: jq -c '.[]' " + path +
              " > data.jsonl)" : std::string(" (convert it: jq -c . ") + path + " > data.jsonl)");
}
}  // namespace

std::vector<Sample> tokenize_text_line(const Json& j, const Tokenizer& tok, const ChatTemplate* tmpl, int32_t eos_id,
                                       const ChatDataOptions& options) {
  GLINT_CHECK(j.is_object(), "not a JSON object");
  auto chat = [&](const ChatLine& c) { return tokenize_chat(c.messages, c.tools, tok, *tmpl, options); };
  const char* needs_template = kNeedsTemplate;
  if (j.contains("messages")) {
    GLINT_CHECK(tmpl, "a chat line", needs_template);
    return tokenize_chat(j["messages"], j.contains("tools") ? j["tools"] : Json(), tok, *tmpl, options);
  }
  if (j.contains("conversations")) {
    GLINT_CHECK(tmpl, "a ShareGPT (\"conversations\") line is a chat and", needs_template);
    return chat(sharegpt_to_chat(j));
  }
  if (j.contains("instruction") || j.contains("output")) {
    GLINT_CHECK(tmpl, "an Alpaca (\"instruction\", \"output\") line is a chat and", needs_template);
    return chat(alpaca_to_chat(j));
  }
  if (j.contains("prompt") || j.contains("completion")) {
    GLINT_CHECK(j.contains("prompt") && j["prompt"].is_string() && j.contains("completion") &&
                    j["completion"].is_string(),
                "\"prompt\" and \"completion\" must both be strings");
    return {tokenize_prompt_completion(j["prompt"], j["completion"], tok, eos_id)};
  }
  if (j.contains("text")) {
    GLINT_CHECK(j["text"].is_string() && !j["text"].get<std::string>().empty(), "\"text\" must be a non-empty string");
    std::string text = j["text"];
    Sample s = label_spans(text, {{0, text.size()}}, tok, true);
    if (eos_id >= 0) {
      s.input_ids.push_back(eos_id);
      s.labels.push_back(eos_id);
    }
    return {std::move(s)};
  }
  GLINT_CHECK(!j.contains("input_ids"), "a pre-tokenized line (\"input_ids\") among text lines: a file is either "
              "pre-tokenized throughout (its first line decides) or text throughout");
  fail("expected \"messages\" (OpenAI chat), \"conversations\" (ShareGPT), \"instruction\" and \"output\" "
       "(Alpaca), \"prompt\" and \"completion\", or \"text\" (or, for a whole file, \"input_ids\"); got keys ",
       brief([&] {
         Json keys = Json::array();
         for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
         return keys;
       }()));
}

std::vector<Sample> read_text_jsonl(const std::string& path, const Tokenizer& tok, const ChatTemplate* tmpl,
                                    int32_t eos_id, const TextDataOptions& o, TextDataStats* stats) {
  std::ifstream in(path);
  GLINT_CHECK(in, path, ": cannot open");
  std::vector<std::pair<int64_t, std::string>> lines;  // (line number, text)
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n)
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.emplace_back(n, std::move(line));
  check_jsonl(path, lines);
  // Tokenized in parallel; each line's samples or its error kept in line order.
  std::vector<std::vector<Sample>> done(lines.size());
  std::vector<std::string> errors(lines.size());
  // A bad line is one that is not JSON or that tokenize_text_line refuses (glint::Error);
  // any other exception is a bug, not a bad line: the first one is rethrown after the
  // workers stop.
  std::exception_ptr unexpected;
  std::mutex unexpected_mu;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < lines.size();) {
      try {
        Json j;
        try {
          j = Json::parse(lines[i].second);
        } catch (const Json::exception& e) {  // parse_error, or out_of_range for 1e400
          fail("invalid JSON: ", e.what());
        }
        done[i] = tokenize_text_line(j, tok, tmpl, eos_id, o.chat);
      } catch (const Error& e) {
        errors[i] = e.what();
      } catch (...) {
        std::lock_guard<std::mutex> lock(unexpected_mu);
        if (!unexpected) unexpected = std::current_exception();
        next = lines.size();
      }
    }
  };
  int threads = o.threads > 0 ? o.threads : available_cores();
  threads = int(std::min<size_t>(threads, std::max<size_t>(1, lines.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (unexpected) std::rethrow_exception(unexpected);

  TextDataStats st;
  st.lines = int64_t(lines.size());
  std::vector<Sample> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!errors[i].empty()) {
      std::string where = path + ":" + std::to_string(lines[i].first) + ": " + errors[i];
      // Not the line's fault: skipping lines would not help.
      GLINT_CHECK(errors[i].find(kNeedsTemplate) == std::string::npos, where,
                  ", and the tokenizer has none: give --tokenizer DIR with a chat template (tokenizer_config.json's "
                  "chat_template, or chat_template.jinja), or write the data as {\"prompt\", \"completion\"} or "
                  "{\"text\"} lines");
      GLINT_CHECK(st.bad_lines < o.max_bad_lines, where,
                  o.max_bad_lines > 0 ? " (more than --max-bad-lines " + std::to_string(o.max_bad_lines) + " bad lines)"
                                      : std::string(" (--max-bad-lines N skips up to N bad lines)"));
      if (st.bad_lines++ == 0) st.first_bad = where;
      continue;
    }
    for (Sample& s : done[i]) {
      s.line = lines[i].first;
      // After the model's shift, position 0's label is never trained.
      bool trains = std::any_of(s.labels.begin() + 1, s.labels.end(), [](int64_t l) { return l != kIgnoreIndex; });
      if (!trains) {
        ++st.dropped;
        continue;
      }
      out.push_back(std::move(s));
    }
  }
  if (o.seq_len > 0) {
    st.lengths = fit_to_length(&out, o.seq_len);
    st.truncated = st.lengths.cut;
    st.dropped += st.lengths.lost;
  } else {
    st.lengths.samples = int64_t(out.size());
    st.lengths.longest = longest_sample(out, &st.lengths.longest_line);
  }
  st.samples = int64_t(out.size());
  if (stats) *stats = st;
  GLINT_CHECK(!out.empty(), path, ": no samples to train on (", st.lines, " lines, ", st.bad_lines, " bad, ",
              st.dropped, " with no trained token within --seq-len)");
  return out;
}

}  // namespace glint
