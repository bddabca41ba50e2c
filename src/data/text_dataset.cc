#include "data/text_dataset.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>

#include "core/error.h"

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

void check_messages(const Json& messages) {
  GLINT_CHECK(messages.is_array() && !messages.empty(), "\"messages\" must be a non-empty list");
  bool any_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    GLINT_CHECK(m.is_object(), "message ", i, " is not an object");
    GLINT_CHECK(m.contains("role") && m["role"].is_string(), "message ", i, " has no string \"role\"");
    std::string role = m["role"].get<std::string>();
    GLINT_CHECK(role == "system" || role == "user" || role == "assistant" || role == "tool", "message ", i,
                " has unknown role '", role, "' (expected system, user, assistant or tool)");
    if (role != "assistant") continue;
    any_assistant = true;
    bool has_content = m.contains("content") && m["content"].is_string() && !m["content"].get<std::string>().empty();
    bool has_calls = m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
    GLINT_CHECK(has_content || has_calls, "message ", i, " is an empty assistant turn (no content, no tool_calls)");
  }
  GLINT_CHECK(any_assistant, "the conversation has no assistant turn to train on");
}

}  // namespace

std::vector<Sample> tokenize_chat(const Json& messages, const Json& tools, const Tokenizer& tok,
                                  const ChatTemplate& tmpl, const ChatRenderOptions& options) {
  check_messages(messages);
  ChatRenderOptions opt = options;
  opt.tools = tools;
  auto render = [&](size_t n, bool generation_prompt) {
    Json head = Json::array();
    for (size_t i = 0; i < n; ++i) head.push_back(messages[i]);
    opt.add_generation_prompt = generation_prompt;
    return tmpl.render(head, opt);
  };
  const std::string whole = render(messages.size(), false);
  struct Turn {
    std::string prompt, upto;  // render before the turn (with generation prompt), through it
  };
  std::vector<Turn> turns;
  bool consistent = true;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    Turn t{i == 0 ? std::string() : render(i, true), render(i + 1, false)};
    GLINT_CHECK(starts_with(t.upto, t.prompt), "the chat template renders assistant message ", i,
                " in a way that does not continue its own generation prompt");
    consistent = consistent && starts_with(whole, t.upto);
    turns.push_back(std::move(t));
  }
  std::vector<Sample> out;
  if (consistent) {
    std::vector<std::pair<size_t, size_t>> spans;
    for (const Turn& t : turns) spans.emplace_back(t.prompt.size(), trim_end(t.upto, t.prompt.size(), t.upto.size()));
    out.push_back(label_spans(whole, spans, tok, false));
  } else {
    for (const Turn& t : turns)
      out.push_back(label_spans(t.upto, {{t.prompt.size(), trim_end(t.upto, t.prompt.size(), t.upto.size())}},
                                tok, false));
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
  render.extra["enable_thinking"] = value == "true";
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
    } catch (const std::exception&) {
      return false;  // the reader reports it with its line
    }
  }
  return false;
}

std::vector<Sample> read_text_jsonl(const std::string& path, const Tokenizer& tok, const ChatTemplate* tmpl,
                                    int32_t eos_id, const TextDataOptions& o, TextDataStats* stats) {
  std::ifstream in(path);
  GLINT_CHECK(in, path, ": cannot open");
  std::vector<std::pair<int64_t, std::string>> lines;  // (line number, text)
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n)
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.emplace_back(n, std::move(line));
  // Tokenized in parallel; each line's samples or its error kept in line order.
  std::vector<std::vector<Sample>> done(lines.size());
  std::vector<std::string> errors(lines.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < lines.size();) {
      try {
        Json j = Json::parse(lines[i].second);
        GLINT_CHECK(j.is_object(), "not a JSON object");
        if (j.contains("messages")) {
          GLINT_CHECK(tmpl, "a chat line needs the model's chat template (tokenizer_config.json)");
          done[i] = tokenize_chat(j["messages"], j.contains("tools") ? j["tools"] : Json(), tok, *tmpl, o.render);
        } else if (j.contains("prompt") || j.contains("completion")) {
          GLINT_CHECK(j.contains("prompt") && j["prompt"].is_string() && j.contains("completion") &&
                          j["completion"].is_string(),
                      "\"prompt\" and \"completion\" must both be strings");
          done[i] = {tokenize_prompt_completion(j["prompt"], j["completion"], tok, eos_id)};
        } else if (j.contains("text")) {
          GLINT_CHECK(j["text"].is_string() && !j["text"].get<std::string>().empty(), "\"text\" must be a non-empty string");
          std::string text = j["text"];
          Sample s = label_spans(text, {{0, text.size()}}, tok, true);
          if (eos_id >= 0) {
            s.input_ids.push_back(eos_id);
            s.labels.push_back(eos_id);
          }
          done[i] = {std::move(s)};
        } else {
          fail("expected \"messages\", \"prompt\" and \"completion\", or \"text\"");
        }
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    }
  };
  int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  threads = int(std::min<size_t>(threads, std::max<size_t>(1, lines.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();

  TextDataStats st;
  st.lines = int64_t(lines.size());
  std::vector<Sample> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!errors[i].empty()) {
      std::string where = path + ":" + std::to_string(lines[i].first) + ": " + errors[i];
      GLINT_CHECK(st.bad_lines < o.max_bad_lines, where,
                  o.max_bad_lines > 0 ? " (more than --max-bad-lines " + std::to_string(o.max_bad_lines) + " bad lines)"
                                      : std::string(" (--max-bad-lines N skips up to N bad lines)"));
      if (st.bad_lines++ == 0) st.first_bad = where;
      continue;
    }
    for (Sample& s : done[i]) {
      if (o.seq_len > 0 && int64_t(s.input_ids.size()) > o.seq_len) {
        s.input_ids.resize(o.seq_len);
        s.labels.resize(o.seq_len);
        ++st.truncated;
      }
      // After the model's shift, position 0's label is never trained.
      bool trains = std::any_of(s.labels.begin() + 1, s.labels.end(), [](int64_t l) { return l != kIgnoreIndex; });
      if (!trains) {
        ++st.dropped;
        continue;
      }
      out.push_back(std::move(s));
    }
  }
  st.samples = int64_t(out.size());
  if (stats) *stats = st;
  GLINT_CHECK(!out.empty(), path, ": no samples to train on (", st.lines, " lines, ", st.bad_lines, " bad, ",
              st.dropped, " with no trained token within --seq-len)");
  return out;
}

}  // namespace glint
