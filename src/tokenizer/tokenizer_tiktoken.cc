#include "tokenizer/tokenizer_tiktoken.h"

#include <nlohmann/json.hpp>
#include <unicode/uchar.h>

#include <fstream>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/unicode_text.h"

namespace glint {

const char* const kKimiPattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

namespace {

// The value of a base64 character (standard alphabet), or -1.
int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Decodes standard base64 with '=' padding (as Python's base64.b64decode accepts it from
// tiktoken files); false when `s` is not that.
bool decode_base64(std::string_view s, std::string* out) {
  out->clear();
  if (s.empty() || s.size() % 4 != 0) return false;
  size_t pad = 0;
  while (pad < 2 && s[s.size() - 1 - pad] == '=') ++pad;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < s.size() - pad; ++i) {
    int v = base64_value(s[i]);
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(char((acc >> bits) & 0xFF));
    }
  }
  return (acc & ((1u << bits) - 1)) == 0;  // no stray bits in the last character
}

// Python's str.isspace (bidirectional class WS, B or S, or category Zs).
bool python_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_script_name(const std::string& name) {
  return u_getPropertyValueEnum(UCHAR_SCRIPT, name.c_str()) != UCHAR_INVALID_CODE &&
         u_getPropertyValueEnum(UCHAR_GENERAL_CATEGORY_MASK, name.c_str()) == UCHAR_INVALID_CODE;
}

}  // namespace

std::vector<std::string> read_tiktoken_ranks(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GLINT_CHECK(in, path, ": cannot open");
  std::vector<std::string> tokens;
  std::vector<size_t> line_of;  // rank -> line that gave it (0: none yet)
  std::unordered_map<std::string, size_t> token_line;
  std::string line, bytes;
  for (size_t lineno = 1; std::getline(in, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;  // tiktoken skips empty lines
    size_t sp = line.find(' ');
    GLINT_CHECK(sp != std::string::npos && sp > 0 && line.find(' ', sp + 1) == std::string::npos, path,
                ":", lineno, ": expected \"BASE64 RANK\" (one space), found \"", line.substr(0, 200), "\"");
    std::string b64 = line.substr(0, sp), rank_text = line.substr(sp + 1);
    GLINT_CHECK(!rank_text.empty() && rank_text.size() <= 10 &&
                    rank_text.find_first_not_of("0123456789") == std::string::npos,
                path, ":", lineno, ": rank \"", rank_text, "\" is not a non-negative integer");
    uint64_t rank = std::stoull(rank_text);
    GLINT_CHECK(rank < uint64_t(std::numeric_limits<int32_t>::max()), path, ":", lineno, ": rank ", rank,
                " is too large");
    GLINT_CHECK(decode_base64(b64, &bytes), path, ":", lineno, ": \"", b64.substr(0, 200),
                "\" is not base64");
    GLINT_CHECK(!bytes.empty(), path, ":", lineno, ": the token is empty");
    if (rank >= tokens.size()) {
      tokens.resize(rank + 1);
      line_of.resize(rank + 1, 0);
    }
    GLINT_CHECK(line_of[rank] == 0, path, ":", lineno, ": rank ", rank, " is given again (first on line ",
                line_of[rank], ")");
    auto [it, fresh] = token_line.emplace(bytes, lineno);
    GLINT_CHECK(fresh, path, ":", lineno, ": token \"", b64, "\" is given again (first on line ", it->second,
                ")");
    tokens[rank] = bytes;
    line_of[rank] = lineno;
  }
  GLINT_CHECK(!tokens.empty(), path, ": no tokens");
  for (size_t r = 0; r < tokens.size(); ++r)
    GLINT_CHECK(line_of[r] != 0, path, ": rank ", r, " is missing (ranks must be 0..", tokens.size() - 1,
                ", the token ids)");
  return tokens;
}

std::string tiktoken_pattern_to_pcre2(const std::string& pattern, const std::string& where) {
  std::string out;
  out.reserve(pattern.size() * 2);
  size_t i = 0, n = pattern.size();
  while (i < n) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < n) {
      if ((pattern[i + 1] == 'p' || pattern[i + 1] == 'P') && i + 2 < n && pattern[i + 2] == '{') {
        size_t close = pattern.find('}', i + 3);
        GLINT_CHECK(close != std::string::npos, where, ": unterminated \\p{ at offset ", i);
        std::string name = pattern.substr(i + 3, close - i - 3);
        if (name.find_first_of(":=") == std::string::npos && is_script_name(name)) name = "sc:" + name;
        out += std::string("\\") + pattern[i + 1] + "{" + name + "}";
        i = close + 1;
        continue;
      }
      out.append(pattern, i, 2);
      i += 2;
      continue;
    }
    if (c != '[') {
      out += c;
      ++i;
      continue;
    }
    // A class: copy it, rewriting [ITEMS&&[^NOT]].
    size_t start = i++;
    if (i < n && pattern[i] == '^') ++i;
    if (i < n && pattern[i] == ']') ++i;  // a leading ']' is literal
    size_t amp = std::string::npos;
    while (i < n && pattern[i] != ']') {
      if (pattern[i] == '\\') {
        i += 2;
        continue;
      }
      if (pattern[i] == '&' && i + 1 < n && pattern[i + 1] == '&') {
        amp = i;
        break;
      }
      GLINT_CHECK(pattern[i] != '[', where, ": nested class at offset ", i, " (glint rewrites only [A&&[^B]])");
      ++i;
    }
    GLINT_CHECK(i < n, where, ": unterminated class at offset ", start);
    if (amp == std::string::npos) {
      out += tiktoken_pattern_to_pcre2(pattern.substr(start + 1, i - start - 1), where).insert(0, "[") + "]";
      ++i;
      continue;
    }
    GLINT_CHECK(pattern[start + 1] != '^' && pattern.compare(amp, 4, "&&[^") == 0, where,
                ": class intersection at offset ", start, " is not of the form [ITEMS&&[^NOT]]");
    size_t not_end = pattern.find(']', amp + 4);
    while (not_end != std::string::npos && pattern[not_end - 1] == '\\') not_end = pattern.find(']', not_end + 1);
    GLINT_CHECK(not_end != std::string::npos && not_end + 1 < n && pattern[not_end + 1] == ']', where,
                ": class intersection at offset ", start, " is not of the form [ITEMS&&[^NOT]]");
    std::string items = tiktoken_pattern_to_pcre2(pattern.substr(start + 1, amp - start - 1), where);
    std::string excluded = tiktoken_pattern_to_pcre2(pattern.substr(amp + 4, not_end - amp - 4), where);
    out += "(?:(?![" + excluded + "])[" + items + "])";
    i = not_end + 2;
  }
  return out;
}

std::vector<AddedToken> kimi_special_tokens(const nlohmann::json& config, int32_t num_base,
                                            const std::string& where) {
  std::vector<AddedToken> out;
  std::unordered_map<int32_t, size_t> by_id;
  std::unordered_map<std::string, std::string> content_key;
  auto decoder = config.find("added_tokens_decoder");
  if (decoder != config.end() && !decoder->is_null()) {
    GLINT_CHECK(decoder->is_object(), where, ": \"added_tokens_decoder\": expected an object id -> token, found ",
                decoder->type_name());
    for (auto it = decoder->begin(); it != decoder->end(); ++it) {
      std::string at = "added_tokens_decoder." + it.key();
      const std::string& key = it.key();
      GLINT_CHECK(!key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos &&
                      std::stoll(key) <= std::numeric_limits<int32_t>::max(),
                  where, ": \"", at, "\": the key is not a token id");
      int32_t id = int32_t(std::stoll(key));
      GLINT_CHECK(id >= num_base, where, ": \"", at, "\": id ", id, " is a BPE rank of tiktoken.model (ranks run 0..",
                  num_base - 1, "); special tokens come after them");
      const nlohmann::json& v = it.value();
      GLINT_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(), where, ": \"", at,
                  "\": expected {\"content\": \"...\", ...}, found ", v.dump());
      AddedToken a;
      a.id = id;
      a.content = v["content"].get<std::string>();
      GLINT_CHECK(!a.content.empty(), where, ": \"", at, ".content\" is empty");
      GLINT_CHECK(find_invalid_utf8(a.content) == std::string::npos, where, ": \"", at,
                  ".content\" is not valid UTF-8");
      auto special = v.find("special");
      a.special = special == v.end() || special->is_null() || (special->is_boolean() && special->get<bool>());
      auto [seen, fresh] = content_key.emplace(a.content, key);
      GLINT_CHECK(fresh, where, ": \"", at, ".content\" \"", a.content, "\" is also the content of id ", seen->second);
      by_id.emplace(id, out.size());
      out.push_back(std::move(a));
    }
  }
  for (int32_t k = 0; k < kKimiReservedSpecialTokens; ++k) {
    int32_t id = num_base + k;
    if (by_id.count(id)) continue;
    AddedToken a;
    a.id = id;
    a.content = "<|reserved_token_" + std::to_string(id) + "|>";
    a.special = true;
    GLINT_CHECK(content_key.emplace(a.content, std::to_string(id)).second, where, ": \"", a.content,
                "\" names another id in added_tokens_decoder than the one it reserves");
    out.push_back(std::move(a));
  }
  return out;
}

void kimi_chunks(std::string_view text, size_t max_chunk_chars, size_t max_run_chars,
                 std::vector<std::string_view>* out) {
  if (text.empty()) {
    out->push_back(text);
    return;
  }
  size_t pos = 0, slice_start = 0, chunk_chars = 0, run = 0;
  bool run_space = false;
  while (pos < text.size()) {
    size_t here = pos;
    bool space = python_isspace(next_code_point(text, &pos));
    if (chunk_chars == max_chunk_chars) {  // a new 400,000-character chunk: runs restart
      out->push_back(text.substr(slice_start, here - slice_start));
      slice_start = here;
      chunk_chars = 0;
    }
    if (chunk_chars == 0) {
      run_space = space;
      run = 1;
    } else if (space != run_space) {
      run_space = space;
      run = 1;
    } else if (++run > max_run_chars) {
      out->push_back(text.substr(slice_start, here - slice_start));
      slice_start = here;
      run = 1;
    }
    ++chunk_chars;
  }
  out->push_back(text.substr(slice_start));
}

}  // namespace glint
