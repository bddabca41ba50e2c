// A deterministic generator of varied test strings for tokenizer cross-checks.
//
// Every string is valid UTF-8. The mix covers what a byte-level BPE tokenizer's
// pre-tokenizer and normalizer treat differently: many scripts (CJK, kana, Hangul and
// conjoining jamo, Arabic, Hebrew with points, Devanagari, Thai, Cyrillic, Greek),
// combining marks and decomposed forms that NFC composes, emoji with skin tones, ZWJ
// sequences, flags and keycaps, code, runs of spaces/tabs/newlines (also CR, NEL, NBSP,
// ideographic space, U+180E), ASCII and non-ASCII digits and long digit runs, punctuation,
// contractions in several cases, and special tokens embedded in text (whole and broken).
// For o200k-style regexes (gpt-oss) also: words in real scripts and languages, titlecase
// and modifier letters and marks inside words, a non-letter prefix glued to a word,
// digit groups inside numbers, dates and versions, punctuation runs ending in newlines
// or slashes, and special tokens followed by the role/channel words of chat markup.
//
// The scripted fragments use blocks assigned by Unicode 13. One kind of fragment draws
// code points from all of Unicode, kept only when `usable` accepts them (the test
// passes "assigned in ICU's Unicode version": glint's character classes know no newer
// characters, while the reference's regex engine does).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reference/splitmix.h"
#include "tokenizer/unicode_text.h"

namespace glint::testing {

class TokenizerCorpus {
 public:
  // `specials`: added-token contents to embed (e.g. "<|im_start|>").
  TokenizerCorpus(uint64_t seed, std::vector<std::string> specials,
                  std::function<bool(char32_t)> usable)
      : state_{seed}, specials_(std::move(specials)), usable_(std::move(usable)) {}

  // The next string: 1..14 fragments; about one in 40 is long (~1-4 KB).
  std::string next() {
    std::string s;
    if (below(40) == 0) {
      int n = 20 + below(60);
      for (int i = 0; i < n; ++i) fragment(&s, true);
      return s;
    }
    int n = 1 + below(14);
    for (int i = 0; i < n; ++i) {
      fragment(&s, false);
      int sep = below(10);
      if (sep < 5) s += ' ';
      else if (sep == 5) s += '\n';
    }
    return s;
  }

 private:
  int below(int n) { return state_.below(n); }
  char32_t in(char32_t lo, char32_t hi) { return lo + char32_t(below(int(hi - lo + 1))); }
  template <size_t N>
  const char* pick(const char* const (&list)[N]) { return list[below(int(N))]; }

  static void put(char32_t c, std::string* out) { append_utf8(c, out); }

  // A run of `n` code points from [lo, hi].
  void run(std::string* s, int n, char32_t lo, char32_t hi) {
    for (int i = 0; i < n; ++i) put(in(lo, hi), s);
  }

  void word(std::string* s) {
    static const char* const kWords[] = {
        "the", "The", "THE", "tokenizer", "hello", "world", "Hello", "mixture", "of", "experts",
        "fine-tune", "don", "isn", "we", "they", "It", "you", "naïve", "café", "résumé",
        "über", "straße", "Ærøskøbing", "über-cool", "a", "I", "x", "GPU", "LoRA", "MoE",
        "state_dict", "__init__", "camelCase", "snake_case", "HTTP", "e.g.", "i.e.", "U.S.A."};
    static const char* const kSuffix[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S",
                                          "'T", "'RE", "'Ve", "'LL", "'D", "’s", "'ſ", "'x"};
    s->append(pick(kWords));
    if (below(5) == 0) s->append(pick(kSuffix));
  }

  void fragment(std::string* s, bool long_mode) {
    int len = long_mode ? 5 + below(80) : 1 + below(12);
    switch (below(37)) {
      case 0: case 1: case 2: case 3:
        word(s);
        break;
      case 4: run(s, len, 0x4E00, 0x9FA5); break;                      // CJK (DeepSeek's range)
      case 5: run(s, len, 0x4E00, 0x9FEF); break;                      // CJK incl. past U+9FA5
      case 6:                                                           // hiragana or katakana
        if (below(2)) run(s, len, 0x3041, 0x3096);
        else run(s, len, 0x30A1, 0x30FA);
        break;
      case 7: run(s, len, 0xAC00, 0xD7A3); break;                      // Hangul syllables
      case 8:                                                           // conjoining jamo (NFC composes)
        for (int i = 0; i < len; ++i) {
          put(in(0x1100, 0x1112), s);
          put(in(0x1161, 0x1175), s);
          if (below(2)) put(in(0x11A8, 0x11C2), s);
        }
        break;
      case 9:                                                           // Arabic letters, marks, digits
        for (int i = 0; i < len; ++i) put(below(6) ? in(0x0621, 0x064A) : in(0x064B, 0x0669), s);
        break;
      case 10:                                                          // Hebrew with points
        for (int i = 0; i < len; ++i) put(below(4) ? in(0x05D0, 0x05EA) : in(0x05B0, 0x05BC), s);
        break;
      case 11: run(s, len, 0x0900, 0x097F); break;                     // Devanagari incl. digits
      case 12:                                                          // Thai (assigned parts)
        for (int i = 0; i < len; ++i) put(below(8) ? in(0x0E01, 0x0E3A) : in(0x0E3F, 0x0E5B), s);
        break;
      case 13: run(s, len, 0x0410, 0x044F); break;                     // Cyrillic
      case 14: run(s, len, 0x0386, 0x03CE); break;                     // Greek (some unassigned gaps: Cn)
      case 15:                                                          // decomposed Latin: letter + marks
        for (int i = 0; i < len; ++i) {
          put(below(2) ? in('a', 'z') : in('A', 'Z'), s);
          int marks = below(3);
          for (int k = 0; k < marks; ++k) put(in(0x0300, 0x036F), s);
        }
        break;
      case 16: {                                                        // emoji
        static const char* const kEmoji[] = {
            "\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F44B\U0001F3FF",
            "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",
            "\U0001F469\U0001F3FE\u200D\U0001F4BB", "\U0001F3F3\uFE0F\u200D\U0001F308",
            "\U0001F1FA\U0001F1F8", "\U0001F1EF\U0001F1F5", "1\uFE0F\u20E3", "#\uFE0F\u20E3",
            "\u2764\uFE0F", "\u2764", "\U0001F9D1\u200D\U0001F91D\u200D\U0001F9D1", "\u263A\uFE0F"};
        for (int i = 0; i < 1 + len / 3; ++i) {
          if (below(2)) s->append(pick(kEmoji));
          else put(below(2) ? in(0x1F300, 0x1F5FF) : in(0x1F600, 0x1F64F), s);
        }
        break;
      }
      case 17: {                                                        // code
        static const char* const kCode[] = {
            "def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
            "if x != None and y >= 3:", "#include <vector>\n", "std::vector<int> v{1, 2, 3};",
            "x=[1,2,3];print(x[::-1])", "SELECT * FROM t WHERE id = 42;", "<div class=\"a\">&nbsp;</div>",
            "{\"key\": [1, 2.5e-3, null]}", "    \n        pass", "a->b->c", "https://example.com/a?b=1&c=2",
            "user@example.org", "$HOME/.config", "C:\\Windows\\System32", "`code`", "/* comment */",
            "x += 1  # comment", "λx.x", "0x1F600", "3.14159", "1,234,567.89", "-42", "1e10"};
        s->append(pick(kCode));
        break;
      }
      case 18: {                                                        // whitespace runs
        static const char* const kSpace[] = {" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n",
                                             "\u00A0", "\u3000", "\u2009", "\u0085", "\u2028",
                                             "\u200B", "\v", "\f", "\t\t", "    ", "\u180E"};
        for (int i = 0; i < len; ++i) s->append(pick(kSpace));
        break;
      }
      case 19: case 20: {                                               // digits
        int n = long_mode ? 1 + below(400) : 1 + below(20);
        for (int i = 0; i < n; ++i) put(char32_t('0' + below(10)), s);
        break;
      }
      case 21: {                                                        // other numerals
        static const char32_t kBase[] = {0x0660, 0x06F0, 0x0966, 0x0E50, 0xFF10, 0x1D7CE};
        char32_t base = kBase[below(6)];
        for (int i = 0; i < len; ++i) put(base + char32_t(below(10)), s);
        if (below(3) == 0) put(below(2) ? in(0x00B2, 0x00B3) : in(0x2160, 0x216B), s);  // ² Ⅻ
        if (below(3) == 0) put(in(0x00BC, 0x00BE), s);                                  // ½
        break;
      }
      case 22: {                                                        // punctuation
        static const char* const kPunct[] = {".", ",", "!", "?", "...", "…", "—", "–", "(", ")",
                                             "[", "]", "{", "}", "\"", "'", "«", "»", "„", "“",
                                             "”", "。", "、", "「", "」", "！", "？", "：", "·", "¿",
                                             "¡", "§", "©", "®", "™", "°", "€", "$", "£", "¥",
                                             "%", "&", "*", "@", "#", "^", "~", "|", "\\", "/",
                                             "<", ">", "=", "+", "-", "_", "`", ";", ":", "‐"};
        for (int i = 0; i < len; ++i) s->append(pick(kPunct));
        break;
      }
      case 23: case 24:                                                 // special tokens
        if (!specials_.empty()) {
          const std::string& t = specials_[size_t(below(int(specials_.size())))];
          if (below(6) == 0) {  // a broken token: cut at a code point boundary
            size_t cut = size_t(below(int(t.size())));
            while (cut > 0 && (static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) --cut;
            s->append(t, 0, cut);
          } else {
            s->append(t);
          }
        }
        break;
      case 25: run(s, len, 0x00C0, 0x024F); break;                     // Latin-1 supplement / extended
      case 26: run(s, len, 0x0000, 0x001F); break;                     // C0 controls
      case 27: run(s, len, 0x007F, 0x00BF); break;                     // DEL, C1 controls, Latin-1 symbols
      case 28: {                                                        // precomposed vs decomposed pairs
        static const char* const kPairs[] = {"é", "e\u0301", "Å", "A\u030A", "\u212B", "ñ", "n\u0303",
                                             "ḱ", "k\u0301", "ü", "u\u0308", "ǖ", "u\u0308\u0304",
                                             "ệ", "e\u0323\u0302", "가", "\u1100\u1161", "ﬁ", "Ω", "\u2126"};
        for (int i = 0; i < len; ++i) s->append(pick(kPairs));
        break;
      }
      case 30: case 31:                                                 // any usable code point
        for (int i = 0; i < len; ++i) {
          char32_t c;
          do {
            int plane = below(8);
            c = plane < 4 ? in(0x80, 0xFFFF) : plane < 6 ? in(0x10000, 0x1FFFF)
                : plane < 7 ? in(0x20000, 0x3FFFF) : in(0xE0000, 0x10FFFF);
          } while ((c >= 0xD800 && c <= 0xDFFF) || !usable_(c));
          put(c, s);
          if (below(4) == 0) s->push_back(" a1'\n."[below(6)]);
        }
        break;
      case 33: {                                                        // real multilingual text
        static const char* const kText[] = {
            "Привет, как дела?", "こんにちは、世界！", "我喜欢机器学习。", "안녕하세요, 반갑습니다.",
            "مرحبا بالعالم", "שָׁלוֹם עוֹלָם", "नमस्ते दुनिया", "สวัสดีครับ ยินดีที่ได้รู้จัก",
            "Γειά σου Κόσμε", "Türkçe öğreniyorum", "Tiếng Việt có dấu", "Ça va? Très bien!",
            "Zürich, München & Köln", "Ελληνικά ΚΕΦΑΛΑΙΑ", "ДОБРЫЙ ДЕНЬ", "español: ¿qué tal?",
            "Þórður Ǆemal ǅemal ǈudevit", "ᾈδης ᾋ", "ʰʲˢ modifier ʼlike", "Ⅻ ⅻ ↉",
            "polski: zażółć gęślą jaźń", "हिन्दी में लिखा गया पाठ", "日本語のテキストです。", "繁體中文與简体中文"};
        s->append(pick(kText));
        break;
      }
      case 34:                                                          // chat markup
        if (!specials_.empty()) {
          static const char* const kRole[] = {
              "system", "user", "assistant", "developer", "tool", "analysis", "commentary", "final",
              "assistant to=functions.get_weather", " to=python", "json", "\n", "\n\n",
              "commentary to=functions.search <|constrain|>json", "{\"q\": \"x\"}", "\nHello"};
          s->append(specials_[size_t(below(int(specials_.size())))]);
          s->append(pick(kRole));
        }
        break;
      case 35: {                                                        // a prefix glued to a word
        static const char* const kPrefix[] = {"\t", "\u00A0", "(", "\"", "@", "#", "_", ".", "$",
                                              "-", "'", "\u3000", "\u2019", "/", "\U0001F600", "\u0301"};
        static const char* const kWord[] = {"Hello", "hello", "HELLO", "HeLLo", "ǅemal", "DŽEMAL",
                                            "CamelCase", "XMLHttpRequest", "e\u0301t\u00E9", "E\u0301TE\u0301",
                                            "naïveté", "ʰello", "Ὀδυσσεύς", "Ǉubljana", "ΣΊΣΥΦΟΣ"};
        static const char* const kSuffix[] = {"", "", "'s", "'S", "'ll", "'LL", "'Re", "'ve", "'D", "n't",
                                              "'t'", "'s's", "'ſ"};
        s->append(pick(kPrefix));
        s->append(pick(kWord));
        s->append(pick(kSuffix));
        break;
      }
      case 36: {                                                        // numbers and code punctuation
        static const char* const kNum[] = {
            "2024-06-01", "v1.2.3", "1,234,567", "12:30:45", "3.14159265358979", "abc123def4567",
            "1234567890123", "0.000001", "+1 (555) 123-4567", "$1,000,000.00", "50%", "x²+y²",
            "});\n\n", "*/\n", "://", "<!--\r\n", "...\n/", "]]\r\r\n", "=>\n", "?>//",
            "   \n\n", "\t\r\n", " \n \n", "\n\t\t", "a\n\n\nb", "  x  "};
        s->append(pick(kNum));
        break;
      }
      default:                                                          // mixed-script words
        for (int i = 0; i < len; ++i) {
          switch (below(5)) {
            case 0: put(in('a', 'z'), s); break;
            case 1: put(in(0x4E00, 0x4FFF), s); break;
            case 2: put(in(0x0430, 0x044F), s); break;
            case 3: put(in('0', '9'), s); break;
            default: put(in(0x3041, 0x3093), s); break;
          }
        }
        break;
    }
  }

  SplitMix64 state_;
  std::vector<std::string> specials_;
  std::function<bool(char32_t)> usable_;
};

}  // namespace glint::testing
