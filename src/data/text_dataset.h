// Text training data: JSONL of chats, prompt/completion pairs or plain text, turned into
// the token ids and labels the Python stack (transformers' apply_chat_template and the
// tokenizer) would produce.
//
// Line forms (one JSON object per line, its form found in the order listed; blank lines
// are skipped):
//   {"messages": [...], "tools": [...]}   OpenAI chat format (tool calls and tool
//                                          results included): rendered with the model's
//                                          chat template, tokenized without added special
//                                          tokens; only assistant turns are trained
//   {"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", ...}],
//    "system": "...", "tools": ...}       ShareGPT: read as the chat above. from human/user
//                                          -> user, gpt/assistant/model -> assistant,
//                                          system -> system, developer -> developer,
//                                          tool/observation/
//                                          function_response -> tool; function_call ->
//                                          an assistant turn with tool_calls (its value a
//                                          JSON string {"name", "arguments"}). Turns may
//                                          use "role"/"content" instead; "system" becomes
//                                          a leading system message; "tools" is a list or
//                                          a string holding one as JSON
//   {"instruction": "...", "input": "...", "output": "...", "system": "...",
//    "history": [["q", "a"], ...]}        Alpaca: read as the chat [system], history
//                                          pairs as user/assistant turns (their answers
//                                          trained too), user instruction + "\n" + input
//                                          (LLaMA-Factory's convention; an empty part left
//                                          out), assistant output. input, system and
//                                          history are optional
//   {"prompt": "...", "completion": "..."} tokenized as prompt + completion (+ EOS); the
//                                          tokens holding completion bytes and EOS are
//                                          trained (" Paris" after "France:" included)
//   {"text": "..."}                        tokenized (+ EOS); every token is trained
//
// Assistant spans come from rendering the conversation incrementally: for assistant
// message i, the render of messages[0, i) with the generation prompt ends where the turn
// starts, and the render of messages[0, i] ends where it ends (trailing whitespace after
// the end-of-turn token is not trained). When those renders are prefixes of the whole
// conversation's render, the conversation is one sample with every assistant span
// trained. A template that renders earlier turns differently once later turns follow
// (Qwen3 and GLM drop earlier turns' thinking, gpt-oss their analysis channel) gives one
// sample per assistant turn instead, each the conversation up to that turn as the model
// sees it when it writes the turn: the render before the turn with the generation prompt,
// then the turn. When the render through the turn does not continue that prompt (gpt-oss
// keeps a tool call's analysis in the prompt of the answer that follows, and drops it once
// the answer is there), the turn is the part of that render after the longest tail of the
// prompt found in it (a tail holding at least the generation prompt). strftime_now() reads
// one clock value for all renders of a conversation (a fixed one with --chat-date).
//
// The model's stop tokens (ChatDataOptions::stop_ids): a template whose assistant turn
// has no end token of its own (GLM's) lets the model stop by writing the role token that
// opens the next message. When the template renders one of the stop tokens right after a
// turn, the turn's span takes it: the opening of the message that follows the turn, or,
// after the conversation's last assistant turn, of a user message that would follow it.
// A turn that already ends with its own end token (ChatML's <|im_end|>) is followed by
// text that is no stop token, and keeps its span.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/lengths.h"
#include "data/sample.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace glint {

// What a tokenizer directory provides: tokenizer.json, the chat template and special
// tokens of tokenizer_config.json (when it has them).
struct TextTokenizer {
  Tokenizer tokenizer;
  std::optional<ChatTemplate> chat;  // absent when the directory defines no chat format
  int32_t eos_id = -1;               // eos_token's id, or -1
  int32_t pad_id = -1;               // pad_token's id, else eos_id, else -1
  // Throws glint::Error for a missing or malformed tokenizer.json, a malformed chat
  // template, or a malformed special token in tokenizer_config.json.
  static TextTokenizer load(const std::string& dir);
};

// How a chat becomes samples.
struct ChatDataOptions {
  ChatRenderOptions render;       // chat rendering: extra variables such as enable_thinking,
                                  // the clock of strftime_now()
  std::vector<int64_t> stop_ids;  // the model's stop tokens (model_stop_token_ids): an
                                  // assistant turn's span takes the one rendered right after
                                  // it (see the file comment); empty: none
};

struct TextDataOptions {
  int64_t seq_len = 0;        // samples longer than this are cut (see data/lengths.h;
                              // 0: no cut)
  int64_t max_bad_lines = 0;  // malformed lines skipped and counted; the next one stops
                              // the run with file:line and the reason
  ChatDataOptions chat;       // chat rendering and the model's stop tokens
  int threads = 0;            // tokenization threads (0: all cores)

  // --enable-thinking: "true" or "false" sets the template variable, "" leaves it unset
  // (the template's default). Anything else throws glint::Error naming the value.
  void set_enable_thinking(const std::string& value);
  // --chat-date: "YYYY-MM-DD" fixes the date strftime_now() shows (chat_date_clock); ""
  // leaves the system clock. A bad date throws glint::UsageError naming the flag.
  void set_chat_date(const std::string& date);
};

// --chat-date "YYYY-MM-DD" as the clock of ChatRenderOptions::now: noon of that day in the
// local time zone (the zone strftime_now() formats in), so that every format of it shows
// that day. Throws glint::UsageError naming --chat-date and the value for anything else
// (another form, a day that does not exist such as 2025-02-30).
int64_t chat_date_clock(const std::string& date);

struct TextDataStats {
  int64_t lines = 0;       // non-blank lines
  int64_t samples = 0;     // samples produced
  int64_t bad_lines = 0;   // skipped under max_bad_lines
  int64_t truncated = 0;   // samples cut to seq_len
  int64_t dropped = 0;     // samples with nothing to train (from the start, or after the cut)
  std::string first_bad;   // "file:line: reason" of the first skipped line
  LengthReport lengths;    // the cut (seq_len > 0), else the samples and the longest
};

// One conversation -> one or more samples (see the file comment). Roles: system,
// developer (gpt-oss's harmony; rendered as the template renders it, like system never
// trained), user, assistant, tool. Throws glint::Error for a message list that is empty or
// not a list, a message without a string role, an unknown role (naming it and the known
// ones), an assistant turn with neither content nor tool calls, a conversation without an
// assistant turn, or a template error.
std::vector<Sample> tokenize_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                  const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                  const ChatDataOptions& options);

// A chat line of another format as OpenAI messages and tools (null: none), ready for
// tokenize_chat.
struct ChatLine {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;
};

// A ShareGPT line ({"conversations": [...]}, see the file comment) as a chat. Throws
// glint::Error for "conversations" that is not a non-empty list, a turn that is not an
// object or lacks a string from/role or value/content, an unknown "from" (naming the turn
// index, the value and the accepted ones), an empty assistant turn, a function_call value
// that is not JSON {"name", "arguments"} (or a list of them), a non-string "system", or
// "tools" that is neither a list nor a JSON string of one. Errors name the turn as
// conversations[i].
ChatLine sharegpt_to_chat(const nlohmann::ordered_json& line);

// An Alpaca line ({"instruction", "input", "output", "system", "history"}, see the file
// comment) as a chat. Throws glint::Error naming the key for a missing or non-string
// instruction or output, an empty output, a non-string input or system, or a history that
// is not a list of [question, answer] string pairs (naming the pair) or has an empty answer.
// null counts as absent for the optional keys.
ChatLine alpaca_to_chat(const nlohmann::ordered_json& line);

// One parsed JSON line of a text file -> its samples. The form is detected in this order:
// "messages", "conversations", "instruction"/"output", "prompt"/"completion", "text".
// Chat forms need `chat_template` (null: an error). Throws glint::Error with the reason
// (the caller adds file:line), e.g. for a line of no known form, listing them.
std::vector<Sample> tokenize_text_line(const nlohmann::ordered_json& line, const Tokenizer& tokenizer,
                                       const ChatTemplate* chat_template, int32_t eos_id,
                                       const ChatDataOptions& options);

// prompt + completion -> one sample with the completion (and EOS when eos_id >= 0) trained.
Sample tokenize_prompt_completion(const std::string& prompt, const std::string& completion,
                                  const Tokenizer& tokenizer, int32_t eos_id);

// Reads and tokenizes every line of `path` in parallel before training starts. chat
// lines need `chat_template` (null: a chat line is an error naming the line). Throws
// glint::Error "path:line: reason" for the first bad line beyond max_bad_lines, or when
// the file yields no samples.
std::vector<Sample> read_text_jsonl(const std::string& path, const Tokenizer& tokenizer,
                                    const ChatTemplate* chat_template, int32_t eos_id,
                                    const TextDataOptions& options, TextDataStats* stats);

// Whether the first non-blank line of a JSONL file is pre-tokenized ({"input_ids": ...}).
bool is_pretokenized_jsonl(const std::string& path);

}  // namespace glint
