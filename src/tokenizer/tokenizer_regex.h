// A compiled PCRE2 pattern (UTF + Unicode properties, JIT where available) that finds
// all non-overlapping matches in a piece of valid UTF-8 text, the way the `tokenizers`
// Split pre-tokenizer iterates its regex.
//
// Unicode version: each general-category property \p{X} of the pattern is extended with
// the characters that the linked ICU assigns to X but PCRE2's older tables do not know
// (Debian 12: ICU 72 = Unicode 15.0, PCRE2 10.42 = Unicode 14.0). Characters newer than
// ICU's version stay unassigned, and \P{X}, \w, \d keep PCRE2's tables.
//
// \s is the White_Space property, as in the reference's engine (PCRE2's own \s also
// takes U+180E); so is \S outside a character class.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace glint {

class TokenizerRegex {
 public:
  // Compiles `pattern` (PCRE2_UTF | PCRE2_UCP; PCRE2_LITERAL when `literal`).
  // Throws glint::Error naming `where` (e.g. "tokenizer.json: pre_tokenizer...") and
  // PCRE2's message and offset when the pattern does not compile.
  TokenizerRegex(const std::string& pattern, bool literal, const std::string& where);
  ~TokenizerRegex();
  TokenizerRegex(const TokenizerRegex&) = delete;
  TokenizerRegex& operator=(const TokenizerRegex&) = delete;

  // Appends to `out` the [begin, end) byte offsets, relative to `text`, of every
  // non-empty leftmost-first match, scanning left to right; after an empty match the
  // scan moves on by one code point. Lookarounds see only `text`.
  // REQUIRES: `text` is valid UTF-8 (not re-checked). Thread-safe (const).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string pattern_;
};

}  // namespace glint
