// tiktoken tokenizers as Kimi-K2 ships them (moonshotai/Kimi-K2-Instruct): no
// tokenizer.json, but
//   tiktoken.model         one line per token: base64 of its bytes, a space, its rank
//                          (the ranks are the ids 0..N-1 and the merge priorities);
//   tokenization_kimi.py   the pre-tokenizer regex (kKimiPattern below) and the special
//                          tokens: ids N, N+1, ... named by tokenizer_config.json;
//   tokenizer_config.json  added_tokens_decoder: {"163584": {"content": "[BOS]", ...}}.
// Tokenizer::load builds a tokenizer from these when a directory has tiktoken.model and
// no tokenizer.json; this file holds the parts that are tiktoken's own.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_added.h"

namespace glint {

// tokenization_kimi.py's pat_str, verbatim (the alternatives joined by "|"). Its classes
// [A&&[^B]] are the Rust regex crate's intersections (tiktoken's engine), which
// tiktoken_pattern_to_pcre2 rewrites for PCRE2.
extern const char* const kKimiPattern;

// The number of reserved special-token ids after the BPE ranks in tokenization_kimi.py
// (num_reserved_special_tokens): ids N..N+255 not named in added_tokens_decoder are
// "<|reserved_token_ID|>".
constexpr int32_t kKimiReservedSpecialTokens = 256;

// Kimi's encode cuts the text into pieces before tiktoken sees it: every 400,000 code
// points, and within those before the 25,001st code point of a run of whitespace
// (Python's str.isspace) or of non-whitespace. Special tokens and regex matches do not
// cross the cuts.
constexpr size_t kKimiMaxChunkChars = 400000;
constexpr size_t kKimiMaxRunChars = 25000;

// Reads a tiktoken.model file: returns the token bytes by rank. Throws glint::Error
// naming the file and line for a line that is not "BASE64 RANK", a bad base64 string,
// a rank that is repeated (naming both lines), a token that is repeated, or ranks that
// are not exactly 0..N-1.
std::vector<std::string> read_tiktoken_ranks(const std::string& path);

// `pattern` (a tiktoken / Rust regex) in PCRE2 syntax: each class [ITEMS&&[^NOT]] becomes
// (?:(?![NOT])[ITEMS]), and each bare script \p{Name} of more than two letters becomes
// \p{sc:Name} (the Script property, as in Rust; a bare name in PCRE2 >= 10.40 means
// Script_Extensions, which puts e.g. U+3002 "。" in Han). Throws glint::Error naming
// `where` for another use of && or an unterminated class.
std::string tiktoken_pattern_to_pcre2(const std::string& pattern, const std::string& where);

// The special tokens of a Kimi tokenizer with `num_base` BPE tokens: the entries of
// config["added_tokens_decoder"] (id -> {"content", "special"}), and
// "<|reserved_token_ID|>" for the other ids in [num_base, num_base + 256). All are
// matched in the raw text, without strip flags (tiktoken's allowed_special="all").
// Throws glint::Error naming `where` and the key for an id below num_base, a key that is
// not an id, a missing or empty content, or a content given to two ids.
std::vector<AddedToken> kimi_special_tokens(const nlohmann::json& config, int32_t num_base,
                                            const std::string& where);

// Kimi's cuts of `text` (valid UTF-8), appended to `out` as views into it; one empty view
// for an empty text.
void kimi_chunks(std::string_view text, size_t max_chunk_chars, size_t max_run_chars,
                 std::vector<std::string_view>* out);

}  // namespace glint
