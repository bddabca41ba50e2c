// glint data preview: a data file's first samples as the trainer sees them, with the
// tokens that are trained on marked.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "core/fs.h"
#include "model/config.h"
#include "data/lengths.h"
#include "data/text_dataset.h"
#include "data/tokenized_jsonl.h"
#include "generate/generation_defaults.h"

namespace glint::cli {

namespace {

struct PreviewOptions {
  std::string model_dir, tokenizer, data, enable_thinking, chat_date;
  int64_t count = 1, seq_len = 0, max_bad_lines = 0;
};

int run_preview(const PreviewOptions& p) {
  const std::string dir = p.tokenizer.empty() ? p.model_dir : p.tokenizer;
  // Pre-tokenized ({"input_ids": ...}) data only needs the tokenizer to decode it: its
  // chat template is not loaded.
  const bool pretokenized = is_pretokenized_jsonl(p.data);
  TextTokenizer text = pretokenized ? TextTokenizer{Tokenizer::load(dir), std::nullopt} : TextTokenizer::load(dir);
  TextDataOptions o;
  o.seq_len = 0;  // whole: the length is chosen below, as glint train chooses it
  o.max_bad_lines = p.max_bad_lines;
  o.set_enable_thinking(p.enable_thinking);
  o.set_chat_date(p.chat_date);
  // As glint train: an assistant turn trains the stop token that follows it.
  if (!pretokenized) o.chat.stop_ids = model_stop_token_ids(p.model_dir, p.tokenizer, &text.tokenizer);
  TextDataStats st;
  std::vector<Sample> samples;
  if (pretokenized) {
    samples = read_tokenized_jsonl(p.data, text.tokenizer.vocab_size());
    st.lines = st.samples = int64_t(samples.size());
  } else {
    samples = read_text_jsonl(p.data, text.tokenizer, text.chat ? &*text.chat : nullptr, text.eos_id, o, &st);
  }
  // The sequence length glint train would use: --seq-len, or the longest sample capped by
  // the model's max_position_embeddings (when --model has a config.json).
  int64_t max_pos = 0;
  if (!p.model_dir.empty() && path_exists(p.model_dir + "/config.json"))
    max_pos = ModelConfig::from_file(p.model_dir + "/config.json").max_position_embeddings;
  int64_t longest_line = 0, longest = longest_sample(samples, &longest_line);
  std::string length_line;
  const int64_t seq_len = choose_seq_len(p.seq_len, longest, p.data + ":" + std::to_string(longest_line), max_pos,
                                         &length_line);
  LengthReport cut = fit_to_length(&samples, seq_len);
  // Trained tokens in green on a terminal, else between ⟦ and ⟧.
  const bool tty = isatty(STDOUT_FILENO);
  const std::string open = tty ? "\033[32m" : "⟦", close = tty ? "\033[0m" : "⟧";
  for (int64_t k = 0; k < std::min<int64_t>(p.count, int64_t(samples.size())); ++k) {
    const Sample& s = samples[k];
    int64_t trained = 0;
    std::string out;
    for (size_t i = 0; i < s.input_ids.size();) {
      bool on = s.labels[i] != kIgnoreIndex;
      std::vector<int32_t> run;
      for (; i < s.input_ids.size() && (s.labels[i] != kIgnoreIndex) == on; ++i) run.push_back(int32_t(s.input_ids[i]));
      if (on) trained += int64_t(run.size());
      std::string piece = text.tokenizer.decode(run);
      out += on ? open + piece + close : piece;
    }
    std::cout << "--- sample " << k << ": " << s.input_ids.size() << " tokens, " << trained << " trained\n"
              << out << "\n";
  }
  std::cout << "--- " << cut.samples << " samples from " << st.lines << " lines (" << st.dropped
            << " with nothing to train, " << st.bad_lines << " bad lines skipped)\n"
            << "--- " << length_line << "\n"
            << "--- " << cut.summary() << "\n";
  if (cut.lost > 0) std::cout << "--- " << cut.lost_warning(p.data) << "\n";
  return 0;
}

}  // namespace

Action add_data(CLI::App& app) {
  CLI::App* cmd = add_command(app, "data");
  cmd->require_subcommand(1);
  auto p = std::make_shared<PreviewOptions>();
  CLI::App* preview = cmd->add_subcommand("preview", "show samples with their trained tokens marked");
  preview->add_option("--model", p->model_dir, "Hugging Face model directory (its tokenizer)");
  preview->add_option("--tokenizer", p->tokenizer, "tokenizer directory (default: --model)");
  preview->add_option("--data", p->data, "JSONL of chats (messages, ShareGPT, Alpaca), prompt/completion pairs, text, or pre-tokenized input_ids")->required();
  preview->add_option("--count", p->count, "samples to show")->capture_default_str();
  preview->add_option("--seq-len", p->seq_len, "cut samples to this many tokens (0: as glint train chooses: the longest sample, capped by "
              "the model's max_position_embeddings)")->capture_default_str();
  preview->add_option("--max-bad-lines", p->max_bad_lines, "skip and count up to N malformed data lines")->capture_default_str();
  preview->add_option("--enable-thinking", p->enable_thinking, "chat template variable: true or false");
  preview->add_option("--chat-date", p->chat_date, "YYYY-MM-DD: the date chat templates render (default: today)");
  return [p]() {
    GLINT_CHECK(!p->model_dir.empty() || !p->tokenizer.empty(), "data preview: --model or --tokenizer is required");
    return run_preview(*p);
  };
}

}  // namespace glint::cli
