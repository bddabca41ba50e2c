#include "template/jinja_lexer.h"

#include <utility>

#include "core/error.h"
#include "template/jinja_text.h"

namespace glint::jinja {
namespace {

// Source as code points, each with the original line it came from.
struct Src {
  std::vector<char32_t> c;
  std::vector<int> line;
  void push(char32_t ch, int l) {
    c.push_back(ch);
    line.push_back(l);
  }
};

bool is_line_terminator(char32_t c) { return c == '\n' || c == '\r' || c == 0x2028 || c == 0x2029; }

// The preprocessing passes of @huggingface/jinja (in its order): drop one trailing
// newline; lstrip_blocks (/^[ \t]*({[#%-])/gm -> "$1"); trim_blocks (/([#%-]})\n/g ->
// "$1"); remove {% generation %} / {% endgeneration %} keeping the surrounding
// whitespace unless the tag has - markers.
Src preprocess(const std::string& source) {
  Src s;
  int line = 1;
  for (char32_t ch : text::decode(source)) {
    s.push(ch, line);
    if (ch == '\n') ++line;
  }
  if (!s.c.empty() && s.c.back() == '\n') {
    s.c.pop_back();
    s.line.pop_back();
  }
  auto at = [](const Src& x, size_t i) -> char32_t { return i < x.c.size() ? x.c[i] : 0; };

  Src a;  // lstrip_blocks
  for (size_t i = 0; i < s.c.size();) {
    if (i == 0 || is_line_terminator(s.c[i - 1])) {
      size_t j = i;
      while (at(s, j) == ' ' || at(s, j) == '\t') ++j;
      if (at(s, j) == '{' && (at(s, j + 1) == '#' || at(s, j + 1) == '%' || at(s, j + 1) == '-')) {
        a.push(s.c[j], s.line[j]);
        a.push(s.c[j + 1], s.line[j + 1]);
        i = j + 2;
        continue;
      }
    }
    a.push(s.c[i], s.line[i]);
    ++i;
  }

  Src b;  // trim_blocks
  for (size_t i = 0; i < a.c.size();) {
    char32_t c = a.c[i];
    if ((c == '#' || c == '%' || c == '-') && at(a, i + 1) == '}' && at(a, i + 2) == '\n') {
      b.push(c, a.line[i]);
      b.push('}', a.line[i + 1]);
      i += 3;
      continue;
    }
    b.push(c, a.line[i]);
    ++i;
  }

  Src out;  // generation tags
  size_t boundary = 0;  // output before this index belongs to an earlier match
  for (size_t i = 0; i < b.c.size();) {
    if (b.c[i] == '{' && at(b, i + 1) == '%') {
      size_t j = i + 2;
      bool lstrip = at(b, j) == '-';
      if (lstrip) ++j;
      while (text::is_js_space(at(b, j))) ++j;
      auto match_word = [&](const char* w) {
        size_t k = j;
        for (; *w; ++w, ++k)
          if (at(b, k) != char32_t(*w)) return false;
        j = k;
        return true;
      };
      match_word("end");
      bool ok = match_word("generation");
      if (ok) {
        while (text::is_js_space(at(b, j))) ++j;
        bool rstrip = at(b, j) == '-';
        if (rstrip) ++j;
        ok = at(b, j) == '%' && at(b, j + 1) == '}';
        if (ok) {
          j += 2;
          if (lstrip)
            while (out.c.size() > boundary && text::is_js_space(out.c.back())) {
              out.c.pop_back();
              out.line.pop_back();
            }
          while (j < b.c.size() && text::is_js_space(b.c[j])) {
            if (!rstrip) out.push(b.c[j], b.line[j]);
            ++j;
          }
          boundary = out.c.size();
          i = j;
          continue;
        }
      }
    }
    out.push(b.c[i], b.line[i]);
    ++i;
  }
  return out;
}

bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_word(char32_t c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

struct Lexer {
  Src src;
  std::string name;
  std::vector<Token> tokens;
  size_t pos = 0;
  int curly = 0;

  char32_t at(size_t i) const { return i < src.c.size() ? src.c[i] : 0; }
  int line_at(size_t i) const {
    if (src.line.empty()) return 1;
    return i < src.line.size() ? src.line[i] : src.line.back();
  }
  [[noreturn]] void error(const std::string& msg) const {
    fail(name, " line ", line_at(pos), ": ", msg);
  }
  bool starts(const char* s) const {
    for (size_t k = 0; s[k]; ++k)
      if (at(pos + k) != char32_t(static_cast<unsigned char>(s[k]))) return false;
    return true;
  }
  void push(Tok t, std::string v, size_t start) { tokens.push_back({t, std::move(v), line_at(start)}); }
  Tok last() const { return tokens.empty() ? Tok::kEnd : tokens.back().type; }

  void strip_trailing_text() {
    if (!tokens.empty() && tokens.back().type == Tok::kText) {
      tokens.back().value = text::trim_end(tokens.back().value);
      if (tokens.back().value.empty()) tokens.pop_back();
    }
  }
  void skip_space() {
    while (pos < src.c.size() && text::is_js_space(src.c[pos])) ++pos;
  }

  // consumeWhile of @huggingface/jinja: resolves backslash escapes, and reaching the end
  // of the source inside the run is an error.
  template <typename Pred>
  std::string consume_while(Pred pred) {
    std::string out;
    while (pos < src.c.size() && pred(src.c[pos])) {
      if (src.c[pos] == '\\') {
        ++pos;
        if (pos >= src.c.size()) error("unexpected end of template after '\\'");
        char32_t e = src.c[pos++];
        if (e == 'x' || e == 'u') {
          size_t len = e == 'x' ? 2 : 4;
          char32_t v = 0;
          for (size_t k = 0; k < len; ++k) {
            char32_t h = at(pos + k);
            int d = is_digit(h) ? int(h - '0') : (h >= 'a' && h <= 'f') ? int(h - 'a' + 10)
                    : (h >= 'A' && h <= 'F') ? int(h - 'A' + 10) : -1;
            if (d < 0) error(std::string("invalid hexadecimal escape sequence \\") + char(e));
            v = v * 16 + char32_t(d);
          }
          pos += len;
          text::append_utf8(out, v);
          continue;
        }
        char r;
        switch (e) {
          case 'n': r = '\n'; break;
          case 't': r = '\t'; break;
          case 'r': r = '\r'; break;
          case 'b': r = '\b'; break;
          case 'f': r = '\f'; break;
          case 'v': r = '\v'; break;
          case '\'': r = '\''; break;
          case '"': r = '"'; break;
          case '\\': r = '\\'; break;
          default: {
            std::string bad;
            text::append_utf8(bad, e);
            error("unexpected escaped character '\\" + bad + "'");
          }
        }
        out += r;
        continue;
      }
      text::append_utf8(out, src.c[pos++]);
      if (pos >= src.c.size()) error("unexpected end of template");
    }
    return out;
  }

  void run() {
    static const std::pair<const char*, Tok> kTable[] = {
        {"{%", Tok::kOpenStatement}, {"%}", Tok::kCloseStatement}, {"{{", Tok::kOpenExpression},
        {"}}", Tok::kCloseExpression}, {"(", Tok::kOpenParen}, {")", Tok::kCloseParen},
        {"{", Tok::kOpenBrace}, {"}", Tok::kCloseBrace}, {"[", Tok::kOpenBracket},
        {"]", Tok::kCloseBracket}, {",", Tok::kComma}, {".", Tok::kDot}, {":", Tok::kColon},
        {"|", Tok::kPipe}, {"<=", Tok::kComparison}, {">=", Tok::kComparison},
        {"==", Tok::kComparison}, {"!=", Tok::kComparison}, {"<", Tok::kComparison},
        {">", Tok::kComparison}, {"+", Tok::kAdditive}, {"-", Tok::kAdditive},
        {"~", Tok::kAdditive}, {"**", Tok::kPower}, {"*", Tok::kMultiplicative},
        {"//", Tok::kMultiplicative}, {"/", Tok::kMultiplicative}, {"%", Tok::kMultiplicative},
        {"=", Tok::kEquals}};
    size_t n = src.c.size();
    while (pos < n) {
      Tok lt = last();
      if (lt == Tok::kEnd || lt == Tok::kCloseStatement || lt == Tok::kCloseExpression || lt == Tok::kComment) {
        size_t start = pos;
        std::string text;
        while (pos < n && !(src.c[pos] == '{' && (at(pos + 1) == '%' || at(pos + 1) == '{' || at(pos + 1) == '#')))
          text::append_utf8(text, src.c[pos++]);
        if (!text.empty()) {
          push(Tok::kText, std::move(text), start);
          continue;
        }
      }
      if (starts("{#")) {
        size_t start = pos;
        pos += 2;
        bool strip_before = at(pos) == '-';
        if (strip_before) ++pos;
        std::string comment;
        while (!(at(pos) == '#' && at(pos + 1) == '}')) {
          if (pos + 2 >= n) {
            pos = start;
            error("missing end of comment tag '#}'");
          }
          text::append_utf8(comment, src.c[pos++]);
        }
        bool strip_after = !comment.empty() && comment.back() == '-';
        if (strip_after) comment.pop_back();
        if (strip_before) strip_trailing_text();
        push(Tok::kComment, std::move(comment), start);
        pos += 2;
        if (strip_after) skip_space();
        continue;
      }
      if (starts("{%-") || starts("{{-")) {
        strip_trailing_text();
        bool stmt = at(pos + 1) == '%';
        push(stmt ? Tok::kOpenStatement : Tok::kOpenExpression, stmt ? "{%" : "{{", pos);
        if (!stmt) curly = 0;
        pos += 3;
        continue;
      }
      consume_while([](char32_t c) { return text::is_js_space(c); });
      if (starts("-%}") || starts("-}}")) {
        bool stmt = at(pos + 1) == '%';
        push(stmt ? Tok::kCloseStatement : Tok::kCloseExpression, stmt ? "%}" : "}}", pos);
        pos += 3;
        skip_space();
        continue;
      }
      if (pos >= n) break;
      char32_t c = src.c[pos];
      if (c == '-' || c == '+') {
        Tok t = last();
        if (t == Tok::kText || t == Tok::kEnd) error(std::string("unexpected character '") + char(c) + "'");
        if (!(t == Tok::kIdent || t == Tok::kNumber || t == Tok::kString || t == Tok::kCloseParen ||
              t == Tok::kCloseBracket)) {
          size_t start = pos++;
          std::string num = consume_while(is_digit);
          if (!num.empty() && at(pos) == '.' && is_digit(at(pos + 1))) {
            ++pos;
            num += "." + consume_while(is_digit);
          }
          push(num.empty() ? Tok::kUnary : Tok::kNumber, std::string(1, char(c)) + num, start);
          continue;
        }
      }
      bool matched = false;
      for (const auto& [seq, type] : kTable) {
        if (type == Tok::kCloseExpression && curly > 0) continue;
        if (!starts(seq)) continue;
        push(type, seq, pos);
        if (type == Tok::kOpenExpression) curly = 0;
        else if (type == Tok::kOpenBrace) ++curly;
        else if (type == Tok::kCloseBrace) --curly;
        pos += std::char_traits<char>::length(seq);
        matched = true;
        break;
      }
      if (matched) continue;
      if (c == '\'' || c == '"') {
        size_t start = pos++;
        std::string s = consume_while([c](char32_t x) { return x != c; });
        if (pos >= n) {
          pos = start;
          error("unterminated string literal");
        }
        push(Tok::kString, std::move(s), start);
        ++pos;
        continue;
      }
      if (is_digit(c)) {
        size_t start = pos;
        std::string num = consume_while(is_digit);
        if (last() != Tok::kDot && at(pos) == '.' && is_digit(at(pos + 1))) {
          ++pos;
          num += "." + consume_while(is_digit);
        }
        push(Tok::kNumber, std::move(num), start);
        continue;
      }
      if (is_word(c)) {
        size_t start = pos;
        push(Tok::kIdent, consume_while(is_word), start);
        continue;
      }
      std::string bad;
      text::append_utf8(bad, c);
      error("unexpected character '" + bad + "'");
    }
  }
};

}  // namespace

const char* token_name(Tok t) {
  switch (t) {
    case Tok::kText: return "text";
    case Tok::kNumber: return "number";
    case Tok::kString: return "string";
    case Tok::kIdent: return "identifier";
    case Tok::kEquals: return "'='";
    case Tok::kOpenParen: return "'('";
    case Tok::kCloseParen: return "')'";
    case Tok::kOpenStatement: return "'{%'";
    case Tok::kCloseStatement: return "'%}'";
    case Tok::kOpenExpression: return "'{{'";
    case Tok::kCloseExpression: return "'}}'";
    case Tok::kOpenBracket: return "'['";
    case Tok::kCloseBracket: return "']'";
    case Tok::kOpenBrace: return "'{'";
    case Tok::kCloseBrace: return "'}'";
    case Tok::kComma: return "','";
    case Tok::kDot: return "'.'";
    case Tok::kColon: return "':'";
    case Tok::kPipe: return "'|'";
    case Tok::kAdditive:
    case Tok::kMultiplicative:
    case Tok::kPower:
    case Tok::kComparison:
    case Tok::kUnary: return "operator";
    case Tok::kComment: return "comment";
    case Tok::kEnd: return "end of template";
  }
  return "?";
}

std::vector<Token> tokenize(const std::string& source, const std::string& name) {
  Lexer lx;
  lx.src = preprocess(source);
  lx.name = name;
  lx.run();
  return std::move(lx.tokens);
}

}  // namespace glint::jinja
