// A training data file (JSONL), read as glint train reads one: pre-tokenized
// ({"input_ids", "labels"}) when its first line says so, else text lines of every form
// (messages with tools, ShareGPT conversations, Alpaca, prompt/completion, text), with
// the fixture tokenizer and the tool-calling fixture template.
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "data/text_dataset.h"
#include "data/tokenized_jsonl.h"
#include "fuzz/fuzz_util.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Fixture {
  glint::Tokenizer tokenizer = glint::Tokenizer::load(GLINT_SOURCE_DIR "/tests/data/tokenizer_fixture");
  std::optional<glint::ChatTemplate> chat;
  int32_t eos_id = -1;
  Fixture() {
    std::ifstream in(GLINT_SOURCE_DIR "/tests/reference/template_fixtures/tool_use.jinja");
    std::stringstream source;
    source << in.rdbuf();
    chat.emplace(glint::ChatTemplate::from_source(source.str(), {{"eos_token", "<|im_end|>"}}));
    eos_id = tokenizer.token_to_id("<|im_end|>");
    glint::fuzz::check(eos_id >= 0, "the fixture tokenizer has <|im_end|>");
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      glint::fuzz::write_scratch("train.jsonl", std::string_view(reinterpret_cast<const char*>(data), size));
  const Fixture& f = fixture();
  const int64_t vocab = f.tokenizer.vocab_size();
  std::vector<glint::Sample> samples;
  try {
    if (glint::is_pretokenized_jsonl(path)) {
      samples = glint::read_tokenized_jsonl(path, vocab);
    } else {
      glint::TextDataOptions o;
      o.threads = 1;
      o.max_bad_lines = size % 2;  // one skipped bad line, or none
      glint::TextDataStats stats;
      samples = glint::read_text_jsonl(path, f.tokenizer, &*f.chat, f.eos_id, o, &stats);
    }
  } catch (const glint::Error&) {
    return 0;
  }
  glint::fuzz::check(!samples.empty(), "a file that reads has samples");
  for (const glint::Sample& s : samples) {
    glint::fuzz::check(!s.input_ids.empty() && s.labels.size() == s.input_ids.size(),
                       "a sample has as many labels as tokens, and some");
    for (size_t i = 0; i < s.input_ids.size(); ++i) {
      glint::fuzz::check(s.input_ids[i] >= 0 && s.input_ids[i] < vocab, "token ids are in the vocabulary");
      glint::fuzz::check(s.labels[i] == glint::kIgnoreIndex || (s.labels[i] >= 0 && s.labels[i] < vocab),
                         "labels are ignored or in the vocabulary");
    }
  }
  return 0;
}
