#include "template/jinja_text.h"

#include <locale.h>
#include <wctype.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace glint::jinja::text {

std::vector<char32_t> decode(const std::string& s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < len; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 0x2) ok = false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string encode(const std::vector<char32_t>& cps) {
  std::string out;
  for (char32_t c : cps) append_utf8(out, c);
  return out;
}

int64_t utf16_length(const std::string& s) {
  int64_t n = 0;
  for (char32_t c : decode(s)) n += c >= 0x10000 ? 2 : 1;
  return n;
}

bool is_js_space(char32_t c) {
  return c == 0x09 || c == 0x0A || c == 0x0B || c == 0x0C || c == 0x0D || c == 0x20 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

namespace {

// Byte offset just past the leading whitespace / of the trailing whitespace.
size_t space_prefix_bytes(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    std::string rest = s.substr(i, 4);
    std::vector<char32_t> cps = decode(rest);
    if (cps.empty() || !is_js_space(cps[0])) break;
    std::string one;
    append_utf8(one, cps[0]);
    i += one.size();
  }
  return i;
}

std::string strip_end(const std::string& s) {
  std::vector<char32_t> cps = decode(s);
  size_t e = cps.size();
  while (e > 0 && is_js_space(cps[e - 1])) --e;
  cps.resize(e);
  return encode(cps);
}

locale_t utf8_locale() {
  static locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (l == (locale_t)0) l = newlocale(LC_CTYPE_MASK, "C.utf8", (locale_t)0);
    return l;
  }();
  return loc;
}

}  // namespace

std::string trim_start(const std::string& s) { return s.substr(space_prefix_bytes(s)); }
std::string trim_end(const std::string& s) { return strip_end(s); }
std::string trim(const std::string& s) { return strip_end(trim_start(s)); }

char32_t upper_cp(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  locale_t l = utf8_locale();
  return l == (locale_t)0 ? c : static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), l));
}

char32_t lower_cp(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  locale_t l = utf8_locale();
  return l == (locale_t)0 ? c : static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), l));
}

namespace {

// The unconditional one-to-many mappings of Unicode's SpecialCasing.txt that JavaScript's
// toUpperCase applies (the Latin, Armenian and Greek ones; not the Greek iota-subscript
// forms, which fall back to the simple mapping).
const char32_t* special_upper(char32_t c) {
  switch (c) {
    case 0x00DF: return U"SS";
    case 0x0149: return U"\u02BCN";
    case 0x01F0: return U"J\u030C";
    case 0x0390: return U"\u0399\u0308\u0301";
    case 0x03B0: return U"\u03A5\u0308\u0301";
    case 0x0587: return U"\u0535\u0552";
    case 0x1E96: return U"H\u0331";
    case 0x1E97: return U"T\u0308";
    case 0x1E98: return U"W\u030A";
    case 0x1E99: return U"Y\u030A";
    case 0x1E9A: return U"A\u02BE";
    case 0xFB00: return U"FF";
    case 0xFB01: return U"FI";
    case 0xFB02: return U"FL";
    case 0xFB03: return U"FFI";
    case 0xFB04: return U"FFL";
    case 0xFB05:
    case 0xFB06: return U"ST";
    default: return nullptr;
  }
}

bool is_cased_letter(char32_t c) {
  locale_t l = utf8_locale();
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return l != (locale_t)0 && (iswupper_l(static_cast<wint_t>(c), l) || iswlower_l(static_cast<wint_t>(c), l));
}

}  // namespace

std::string to_upper(const std::string& s) {
  std::string out;
  for (char32_t c : decode(s)) {
    if (const char32_t* m = special_upper(c))
      for (; *m; ++m) append_utf8(out, *m);
    else
      append_utf8(out, upper_cp(c));
  }
  return out;
}

std::string to_lower(const std::string& s) {
  std::vector<char32_t> cps = decode(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    char32_t c = cps[i];
    if (c == 0x0130) {  // İ -> i + combining dot above
      append_utf8(out, 'i');
      append_utf8(out, 0x0307);
    } else if (c == 0x03A3) {  // Σ: final sigma at the end of a word
      bool after_letter = i > 0 && is_cased_letter(cps[i - 1]);
      bool before_letter = i + 1 < cps.size() && is_cased_letter(cps[i + 1]);
      append_utf8(out, after_letter && !before_letter ? 0x03C2 : 0x03C3);
    } else {
      append_utf8(out, lower_cp(c));
    }
  }
  return out;
}

std::string title_case(const std::string& s) {
  auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  std::string out = s;
  for (size_t i = 0; i < out.size(); ++i) {
    bool prev_word = i > 0 && word(out[i - 1]);
    if (!prev_word && out[i] >= 'a' && out[i] <= 'z') out[i] = static_cast<char>(out[i] - 32);
  }
  return out;
}

std::string js_number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  if (x == 0) return "0";
  std::string sign = x < 0 ? "-" : "";
  double a = std::fabs(x);
  // Shortest digit string that round-trips.
  char buf[64];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, a);
    if (std::strtod(buf, nullptr) == a) break;
  }
  std::string e = buf;  // d.ddde[+-]XX
  size_t epos = e.find('e');
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (e[i] != '.') digits += e[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int exp10 = std::atoi(e.c_str() + epos + 1);
  int k = static_cast<int>(digits.size()), n = exp10 + 1;  // value = 0.digits * 10^n
  std::string out;
  if (k <= n && n <= 21) {
    out = digits + std::string(n - k, '0');
  } else if (0 < n && n <= 21) {
    out = digits.substr(0, n) + "." + digits.substr(n);
  } else if (-6 < n && n <= 0) {
    out = "0." + std::string(-n, '0') + digits;
  } else {
    out = digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    out += (n - 1 >= 0 ? "e+" : "e-") + std::to_string(std::abs(n - 1));
  }
  return sign + out;
}

std::string json_quote(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  char buf[16];
  for (char32_t c : decode(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (c < 0x20) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else if (ensure_ascii && c >= 0x7F) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      append_utf8(out, c);
    }
  }
  out += '"';
  return out;
}

}  // namespace glint::jinja::text
