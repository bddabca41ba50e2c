#include "tokenizer/unicode_text.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>
#include <unicode/unistr.h>

#include <cstring>
#include <memory>

#include "core/error.h"

namespace glint {

namespace {

// Length of the well-formed prefix of the UTF-8 sequence that starts at s[i]:
// returns {bytes consumed, complete}. `complete` is true when a whole code point was
// read; otherwise `bytes` is the maximal subpart (>= 1) to replace (Unicode Table 3-7).
struct SeqCheck {
  size_t bytes;
  bool complete;
};

inline SeqCheck check_sequence(const unsigned char* p, size_t n) {
  unsigned char b0 = p[0];
  if (b0 < 0x80) return {1, true};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {1, false};
  }
  size_t i = 1;
  for (; i <= need; ++i) {
    if (i >= n) return {i, false};
    unsigned char b = p[i];
    unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return {i, false};
  }
  return {i, true};
}

// ICU's normalizer restricted to the characters of Unicode 9.0 (kNormalizationUnicodeAge):
// a newer character passes through unchanged and, like an unknown character in a
// Unicode 9.0 implementation, acts as a starter that nothing reorders or composes across.
struct AgedNormalizer {
  icu::UnicodeSet chars;
  std::unique_ptr<icu::FilteredNormalizer2> filtered;
  explicit AgedNormalizer(NormalizationForm form) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* base = nullptr;
    switch (form) {
      case NormalizationForm::kNFC: base = icu::Normalizer2::getNFCInstance(status); break;
      case NormalizationForm::kNFD: base = icu::Normalizer2::getNFDInstance(status); break;
      case NormalizationForm::kNFKC: base = icu::Normalizer2::getNFKCInstance(status); break;
      case NormalizationForm::kNFKD: base = icu::Normalizer2::getNFKDInstance(status); break;
    }
    GLINT_CHECK(U_SUCCESS(status) && base != nullptr, "ICU normalizer data is unavailable: ",
                u_errorName(status));
    chars.applyPattern(icu::UnicodeString::fromUTF8(std::string("[:Age=") + kNormalizationUnicodeAge + ":]"),
                       status);
    GLINT_CHECK(U_SUCCESS(status), "ICU cannot build the set of Unicode ", kNormalizationUnicodeAge,
                " characters: ", u_errorName(status));
    chars.freeze();
    filtered = std::make_unique<icu::FilteredNormalizer2>(*base, chars);
  }
};

const icu::Normalizer2* normalizer(NormalizationForm form) {
  static const AgedNormalizer nfc(NormalizationForm::kNFC), nfd(NormalizationForm::kNFD),
      nfkc(NormalizationForm::kNFKC), nfkd(NormalizationForm::kNFKD);
  switch (form) {
    case NormalizationForm::kNFC: return nfc.filtered.get();
    case NormalizationForm::kNFD: return nfd.filtered.get();
    case NormalizationForm::kNFKC: return nfkc.filtered.get();
    case NormalizationForm::kNFKD: return nfkd.filtered.get();
  }
  return nfc.filtered.get();
}

bool all_ascii(std::string_view s) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w & 0x8080808080808080ULL) return false;
  }
  for (; i < n; ++i)
    if (p[i] & 0x80) return false;
  return true;
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    if (i + 8 <= n) {  // skip ASCII eight bytes at a time
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    SeqCheck c = check_sequence(p + i, n - i);
    if (!c.complete) return i;
    i += c.bytes;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view bytes) {
  if (find_invalid_utf8(bytes) == std::string_view::npos) return std::string(bytes);
  const unsigned char* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::string out;
  out.reserve(bytes.size() + 8);
  size_t n = bytes.size(), i = 0;
  while (i < n) {
    SeqCheck c = check_sequence(p + i, n - i);
    if (c.complete) out.append(bytes.data() + i, c.bytes);
    else out.append("\xEF\xBF\xBD");
    i += c.bytes;
  }
  return out;
}

char32_t next_code_point(std::string_view s, size_t* pos) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data()) + *pos;
  unsigned char b0 = p[0];
  if (b0 < 0x80) {
    *pos += 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *pos += 2;
    return (char32_t(b0 & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (b0 < 0xF0) {
    *pos += 3;
    return (char32_t(b0 & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  *pos += 4;
  return (char32_t(b0 & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
         (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

void append_utf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(char(c));
  } else if (c < 0x800) {
    out->push_back(char(0xC0 | (c >> 6)));
    out->push_back(char(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(char(0xE0 | (c >> 12)));
    out->push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(char(0x80 | (c & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (c >> 18)));
    out->push_back(char(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(char(0x80 | (c & 0x3F)));
  }
}

bool is_normalized_unicode(std::string_view s, NormalizationForm form) {
  if (all_ascii(s)) return true;  // ASCII is invariant under all four forms
  GLINT_CHECK(s.size() < size_t(INT32_MAX), "text of ", s.size(),
              " bytes is too long to normalize (ICU limit 2^31-1)");
  UErrorCode status = U_ZERO_ERROR;
  bool yes = normalizer(form)->isNormalizedUTF8(
      icu::StringPiece(s.data(), int32_t(s.size())), status);
  GLINT_CHECK(U_SUCCESS(status), "ICU normalization check failed: ", u_errorName(status));
  return yes;
}

std::string normalize_unicode(std::string_view s, NormalizationForm form) {
  if (is_normalized_unicode(s, form)) return std::string(s);
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  icu::StringByteSink<std::string> sink(&out);
  UErrorCode status = U_ZERO_ERROR;
  normalizer(form)->normalizeUTF8(0, icu::StringPiece(s.data(), int32_t(s.size())), sink,
                                  nullptr, status);
  GLINT_CHECK(U_SUCCESS(status), "ICU normalization failed: ", u_errorName(status));
  return out;
}

bool is_word_code_point(char32_t c) {
  UChar32 u = UChar32(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL))
    return true;
  int8_t t = u_charType(u);
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

bool is_space_code_point(char32_t c) {
  return u_hasBinaryProperty(UChar32(c), UCHAR_WHITE_SPACE);
}

}  // namespace glint
