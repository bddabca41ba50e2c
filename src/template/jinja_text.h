// Text helpers for the Jinja interpreter: UTF-8 <-> code points, and the JavaScript
// string semantics that @huggingface/jinja (the reference implementation of chat
// templates) exposes: what counts as whitespace for trim(), UTF-16 lengths, the
// Number-to-string algorithm, JSON.stringify's string quoting.
//
// Strings are UTF-8 everywhere; invalid bytes decode as U+FFFD.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace glint::jinja::text {

// Decodes UTF-8 into code points (invalid sequences become U+FFFD).
std::vector<char32_t> decode(const std::string& s);
// Appends the UTF-8 encoding of `cp` to `out`.
void append_utf8(std::string& out, char32_t cp);
std::string encode(const std::vector<char32_t>& cps);

// Number of UTF-16 code units (JavaScript's String.length).
int64_t utf16_length(const std::string& s);

// JavaScript's whitespace set (/\s/ and String.prototype.trim).
bool is_js_space(char32_t cp);
std::string trim(const std::string& s);        // String.prototype.trim
std::string trim_start(const std::string& s);  // trimStart
std::string trim_end(const std::string& s);    // trimEnd

// Case mapping of each code point (Unicode simple case mapping).
std::string to_upper(const std::string& s);
std::string to_lower(const std::string& s);
char32_t upper_cp(char32_t cp);
char32_t lower_cp(char32_t cp);
// JavaScript s.replace(/\b\w/g, c => c.toUpperCase()): ASCII word starts upper-cased,
// everything else unchanged (unlike Python's str.title).
std::string title_case(const std::string& s);

// Number.prototype.toString for a double ("1e+21", "0.1", "5", "NaN", "-Infinity").
std::string js_number(double x);
// JSON.stringify of a string (quotes included). With ensure_ascii, code units >= 0x7F are
// written as \uXXXX (surrogate pairs for characters beyond the BMP).
std::string json_quote(const std::string& s, bool ensure_ascii);

}  // namespace glint::jinja::text
