// Hugging Face `tokenizer.json` tokenizers (byte-level BPE: Qwen, DeepSeek-V3, GPT-2
// style), agreeing token for token with the `tokenizers` library.
//
// encode(text):
//   1. added tokens whose `normalized` is false are found in the raw text
//      (leftmost-longest, with their single_word/lstrip/rstrip flags);
//   2. each remaining segment is normalized (NFC/NFD/NFKC/NFKD, when declared) and
//      searched for the `normalized` added tokens;
//   3. the rest goes through the pre-tokenizer (Split regexes, then ByteLevel);
//   4. each piece is BPE-encoded from its bytes' byte-level characters;
//   5. the post-processor adds its special tokens when add_special_tokens is true.
// decode(ids): each token's byte-level characters become bytes again (a token with a
// character outside the byte alphabet, e.g. most added tokens, contributes its own
// UTF-8), and the bytes are read as UTF-8 with U+FFFD for ill-formed sequences.
//
// Added-token ids follow `tokenizers`: a token's id is its model.vocab id when its
// content is in the vocabulary, else the next id from the vocabulary's size in file
// order; the "id" fields must be ids but are not used (HF-written files agree).
//
// Supported in tokenizer.json (anything else is a glint::Error naming file and key):
//   model: BPE (vocab; merges as "a b" strings or [a, b] pairs; ignore_merges)
//   normalizer: null, NFC, NFD, NFKC, NFKD, Sequence
//   pre_tokenizer: ByteLevel, or a Sequence of Split steps and ByteLevel
//   post_processor: null, ByteLevel, TemplateProcessing (single), RobertaProcessing,
//                   BertProcessing, Sequence
//   decoder: ByteLevel
//
// A directory with tiktoken.model and no tokenizer.json (Kimi-K2) is read as tiktoken
// would (tokenizer_tiktoken.h): tiktoken's BPE over the file's ranks, Kimi's regex, the
// special tokens of tokenizer_config.json, Kimi's cuts of long runs; decode gives the
// tokens' bytes.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_added.h"

namespace glint {

struct EncodeScratch;

class Tokenizer {
 public:
  // Loads `path`: a tokenizer.json file, or a directory that holds one, or else a
  // tiktoken.model (see from_tiktoken). Throws glint::Error naming the file (and the key
  // or line) when it is missing, is not JSON, or declares something unsupported or
  // inconsistent.
  static Tokenizer load(const std::string& path);
  // Whether directory `dir` holds a tokenizer that load reads (tokenizer.json, or
  // tiktoken.model).
  static bool found_in(const std::string& dir);
  // Builds Kimi's tiktoken tokenizer from `model_file` (tiktoken.model) and the
  // added_tokens_decoder of `config_file` (tokenizer_config.json; "" or a missing file:
  // only the reserved special tokens). Errors name the file and line or key.
  static Tokenizer from_tiktoken(const std::string& model_file, const std::string& config_file);
  // Builds from parsed tokenizer.json content; `where` names its source in errors.
  static Tokenizer from_json(const nlohmann::json& j, const std::string& where);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The token ids of `text`. Throws glint::Error naming the byte offset when `text` is
  // not valid UTF-8. Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // The text of `ids` (see the file comment). Throws glint::Error naming the position
  // and value of an id that has no token. Thread-safe.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // The bytes that decode makes of token `id`, before the bytes of a sequence are read
  // as UTF-8 (a byte-level token may hold part of a character; an added token gives
  // its content). Throws glint::Error when `id` has no token.
  const std::string& token_bytes(int32_t id) const;

  // The id of a token spelled `token` (added tokens first, then the model vocabulary,
  // byte-level spelling), or -1.
  int32_t token_to_id(const std::string& token) const;
  // One past the largest id (model vocabulary and added tokens).
  int64_t vocab_size() const;
  const std::vector<AddedToken>& added_tokens() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  // Builds the added-token matchers and the decoding table from impl->added and the
  // model; checks the post-processor's ids.
  static void finish(Impl* impl);
  // encode's steps 1-4 on one piece of text, appended to `out`.
  void encode_text(std::string_view text, EncodeScratch* scratch, std::vector<int32_t>* out) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace glint
