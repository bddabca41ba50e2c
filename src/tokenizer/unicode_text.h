// UTF-8 text helpers for the tokenizer: validation, lossy decoding, Unicode
// normalization (ICU) and the character classes that added-token matching needs.
//
// Every function here takes and returns UTF-8 bytes; none allocates a UTF-16 copy on
// the fast paths (ASCII, or text that is already normalized).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace glint {

// Byte offset of the first byte that does not start a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points above U+10FFFF are ill-formed), or
// std::string_view::npos when `s` is valid UTF-8.
size_t find_invalid_utf8(std::string_view s);

// Decodes bytes as UTF-8, replacing each maximal ill-formed subsequence by U+FFFD (the
// Unicode "substitution of maximal subparts" practice, which Rust's
// String::from_utf8_lossy follows). Valid input comes back unchanged.
std::string utf8_lossy(std::string_view bytes);

// Decodes the code point that starts at s[*pos] and advances *pos past it.
// REQUIRES: s is valid UTF-8 and *pos < s.size() is the start of a sequence.
char32_t next_code_point(std::string_view s, size_t* pos);

// Appends the UTF-8 encoding of `c` (REQUIRES: c <= 0x10FFFF, not a surrogate).
void append_utf8(char32_t c, std::string* out);

enum class NormalizationForm { kNFC, kNFD, kNFKC, kNFKD };

// The Unicode version whose characters normalize_unicode changes. `tokenizers` normalizes
// with unicode-normalization-alignments 0.1.12, whose tables are Unicode 9.0 (measured:
// it reorders U+1E944, a 9.0 mark, but not U+1DF6, a 10.0 one); later characters pass
// through unchanged there, so they do here.
inline constexpr const char* kNormalizationUnicodeAge = "9.0";

// The normalized form of valid UTF-8 `s` (ICU's algorithm, restricted to the characters
// of kNormalizationUnicodeAge). REQUIRES: `s` is valid UTF-8.
std::string normalize_unicode(std::string_view s, NormalizationForm form);

// True when `s` (valid UTF-8) is already in `form`, so normalize_unicode would return
// it unchanged. Cheap for ASCII text.
bool is_normalized_unicode(std::string_view s, NormalizationForm form);

// Character classes with the meaning of the Rust `regex` crate's Unicode `\w` (alphabetic,
// marks, decimal digits, connector punctuation, join controls) and `\s` (White_Space).
bool is_word_code_point(char32_t c);
bool is_space_code_point(char32_t c);

}  // namespace glint
