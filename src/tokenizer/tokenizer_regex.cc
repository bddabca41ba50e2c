#include "tokenizer/tokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>
#include <unicode/uscript.h>
#include <unicode/unistr.h>

#include <cstdio>
#include <map>

#include "core/error.h"

namespace glint {

namespace {

// ---- Unicode properties newer than PCRE2's tables ----
//
// Debian 12's PCRE2 (10.42) has Unicode 14 tables; ICU 72 has Unicode 15, and the
// reference's regex engine newer still. A character assigned after PCRE2's version is
// "unassigned" to PCRE2, so \p{L} would miss a new letter. For each general-category
// property \p{X} in a pattern we add the characters that ICU assigns to X but PCRE2
// does not know, as explicit ranges; the same for each script \p{Name} / \p{sc:Name}.
// (\P{X}, \w and \d are left as PCRE2 has them.)

std::string pcre2_unicode_version() {
  char buf[32] = {0};
  if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, buf) < 0) return "";
  std::string v(buf);  // e.g. "14.0.0"
  size_t dot = v.find('.', v.find('.') + 1);
  return dot == std::string::npos ? v : v.substr(0, dot);
}

const char* category_code(int8_t t) {
  switch (t) {
    case U_UPPERCASE_LETTER: return "Lu";
    case U_LOWERCASE_LETTER: return "Ll";
    case U_TITLECASE_LETTER: return "Lt";
    case U_MODIFIER_LETTER: return "Lm";
    case U_OTHER_LETTER: return "Lo";
    case U_NON_SPACING_MARK: return "Mn";
    case U_COMBINING_SPACING_MARK: return "Mc";
    case U_ENCLOSING_MARK: return "Me";
    case U_DECIMAL_DIGIT_NUMBER: return "Nd";
    case U_LETTER_NUMBER: return "Nl";
    case U_OTHER_NUMBER: return "No";
    case U_CONNECTOR_PUNCTUATION: return "Pc";
    case U_DASH_PUNCTUATION: return "Pd";
    case U_START_PUNCTUATION: return "Ps";
    case U_END_PUNCTUATION: return "Pe";
    case U_INITIAL_PUNCTUATION: return "Pi";
    case U_FINAL_PUNCTUATION: return "Pf";
    case U_OTHER_PUNCTUATION: return "Po";
    case U_MATH_SYMBOL: return "Sm";
    case U_CURRENCY_SYMBOL: return "Sc";
    case U_MODIFIER_SYMBOL: return "Sk";
    case U_OTHER_SYMBOL: return "So";
    case U_SPACE_SEPARATOR: return "Zs";
    case U_LINE_SEPARATOR: return "Zl";
    case U_PARAGRAPH_SEPARATOR: return "Zp";
    default: return nullptr;  // C*: nothing to add
  }
}

// Category name ("L", "Lu", ...) -> class items ("\x{31350}-\x{323AF}...") for the
// characters ICU knows and PCRE2 does not. Empty when PCRE2 is as new as ICU.
const std::map<std::string, std::string>& newer_category_ranges() {
  static const std::map<std::string, std::string> table = [] {
    std::map<std::string, std::string> t;
    std::string pcre_v = pcre2_unicode_version();
    if (pcre_v.empty()) return t;
    UErrorCode status = U_ZERO_ERROR;
    std::string pat = std::string("[[:Age=") + U_UNICODE_VERSION + ":]-[:Age=" + pcre_v + ":]]";
    icu::UnicodeSet newer(icu::UnicodeString::fromUTF8(pat), status);
    if (U_FAILURE(status)) return t;  // e.g. PCRE2 newer than ICU: nothing to add
    char buf[48];
    for (int32_t r = 0; r < newer.getRangeCount(); ++r) {
      UChar32 lo = newer.getRangeStart(r), hi = newer.getRangeEnd(r);
      // Split the range into runs of one category.
      UChar32 run = lo;
      for (UChar32 c = lo; c <= hi + 1; ++c) {
        if (c <= hi && u_charType(c) == u_charType(run)) continue;
        if (const char* code = category_code(u_charType(run))) {
          if (run == c - 1) std::snprintf(buf, sizeof(buf), "\\x{%X}", unsigned(run));
          else std::snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", unsigned(run), unsigned(c - 1));
          t[code] += buf;
          t[std::string(1, code[0])] += buf;
        }
        run = c;
      }
      // The same for scripts (\p{Han}, \p{sc:Han}, \p{Hani}: kimi's pattern names Han).
      run = lo;
      auto script = [](UChar32 ch) {
        UErrorCode st = U_ZERO_ERROR;
        UScriptCode s = uscript_getScript(ch, &st);
        return U_FAILURE(st) ? USCRIPT_INVALID_CODE : s;
      };
      for (UChar32 c = lo; c <= hi + 1; ++c) {
        if (c <= hi && script(c) == script(run)) continue;
        UScriptCode sc = script(run);
        if (sc != USCRIPT_INVALID_CODE && sc != USCRIPT_UNKNOWN) {
          if (run == c - 1) std::snprintf(buf, sizeof(buf), "\\x{%X}", unsigned(run));
          else std::snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", unsigned(run), unsigned(c - 1));
          for (const char* name : {uscript_getName(sc), uscript_getShortName(sc)}) {
            if (name == nullptr) continue;
            t[name] += buf;
            t[std::string("sc:") + name] += buf;
          }
        }
        run = c;
      }
    }
    return t;
  }();
  return table;
}

// ---- \s as the reference's regex engine has it ----
//
// With PCRE2_UCP, PCRE2's \s (and its Perl space \p{Xsp}) is \p{Z}, \h and \v, and its
// \h keeps U+180E MONGOLIAN VOWEL SEPARATOR (a space separator before Unicode 6.3, a
// format character since). The reference's engine (Oniguruma) takes \s as the
// White_Space property, which lacks U+180E: there "\u180E.t" is one punctuation piece
// "\u180E." and a word "t", while PCRE2's \s made it "\u180E" and ".t". White_Space is
// the general category Z (\p{Z} is the bare category in PCRE2) with \t\n\v\f\r and
// U+0085, so \s is written as that (the type escape last, so that a "-" after it stays
// literal as it was).
constexpr const char* kWhiteSpace = "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}";

// `pattern` with every \s, and \S outside a class, replaced by the White_Space class
// (or its complement); with every \p{X} / \pX (X a general category) extended by the
// newer characters of X: inside a class the ranges are appended, outside it becomes a
// class. (A \S inside a class is left to PCRE2: a class cannot hold a complement, and
// it differs only on U+180E.)
std::string patch_pattern(const std::string& pattern) {
  const auto& extra = newer_category_ranges();
  std::string out;
  out.reserve(pattern.size());
  bool in_class = false;
  size_t i = 0, n = pattern.size();
  while (i < n) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < n) {
      char e = pattern[i + 1];
      if (e == 'Q') {  // \Q...\E is literal
        size_t end = pattern.find("\\E", i + 2);
        end = end == std::string::npos ? n : end + 2;
        out.append(pattern, i, end - i);
        i = end;
        continue;
      }
      if (e == 'p' && i + 2 < n) {
        size_t end;
        std::string name;
        if (pattern[i + 2] == '{') {
          size_t close = pattern.find('}', i + 3);
          if (close == std::string::npos) {  // malformed: let PCRE2 report it
            out.append(pattern, i, n - i);
            break;
          }
          name = pattern.substr(i + 3, close - i - 3);
          end = close + 1;
        } else {
          name = pattern.substr(i + 2, 1);
          end = i + 3;
        }
        std::string token = pattern.substr(i, end - i);
        auto it = extra.find(name);
        if (it == extra.end()) out += token;
        else if (in_class) out += token + it->second;
        else out += "[" + token + it->second + "]";
        i = end;
        continue;
      }
      if (e == 's' || (e == 'S' && !in_class)) {
        if (in_class) out += kWhiteSpace;
        else out += std::string(e == 's' ? "[" : "[^") + kWhiteSpace + "]";
        i += 2;
        continue;
      }
      out.append(pattern, i, 2);  // any other escape: its second char is not syntax here
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < n && pattern[i] == '^') out += pattern[i++];
      if (i < n && pattern[i] == ']') out += pattern[i++];  // a leading ']' is literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < n && pattern[i + 1] == ':') {  // [:alpha:]
      size_t end = pattern.find(":]", i + 2);
      end = end == std::string::npos ? n : end + 2;
      out.append(pattern, i, end - i);
      i = end;
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf));
}

// One match-data block (and JIT stack) per thread and pattern size, reused across calls.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  MatchScratch() {
    data = pcre2_match_data_create(16, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (stack != nullptr && context != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

struct TokenizerRegex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

TokenizerRegex::TokenizerRegex(const std::string& pattern, bool literal, const std::string& where)
    : impl_(std::make_unique<Impl>()), pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  // PCRE2_LITERAL admits PCRE2_UTF but not PCRE2_UCP (which only matters for classes).
  uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  auto compile = [&](const std::string& text) {
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), options, &err,
                         &err_offset, nullptr);
  };
  // The pattern as written is compiled first, so that error offsets refer to it.
  impl_->code = compile(pattern);
  if (impl_->code == nullptr)
    fail(where, ": invalid regex ", pattern, " at offset ", err_offset, ": ", pcre2_message(err));
  if (!literal) {
    std::string patched = patch_pattern(pattern);
    if (patched != pattern) {
      pcre2_code_free(impl_->code);
      impl_->code = compile(patched);
      GLINT_ASSERT(impl_->code != nullptr, "the regex ", pattern, " rewritten as ", patched,
                   " (White_Space for \\s, newer Unicode characters) does not compile: ",
                   pcre2_message(err));
    }
  }
  // JIT is an optimization: where it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

TokenizerRegex::~TokenizerRegex() = default;

void TokenizerRegex::find_all(std::string_view text,
                              std::vector<std::pair<size_t, size_t>>* out) const {
  MatchScratch& s = scratch();
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0, n = text.size();
  while (start <= n) {
    int rc = pcre2_match(impl_->code, subject, n, start, PCRE2_NO_UTF_CHECK, s.data, s.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0)
      fail("regex ", pattern_, " failed on a piece of ", n, " bytes: ", pcre2_message(rc));
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    size_t b = ov[0], e = ov[1];
    if (e > b) {
      out->emplace_back(b, e);
      start = e;
    } else {  // empty match: step over one code point
      if (b >= n) return;
      start = b + 1;
      while (start < n && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
}

}  // namespace glint
