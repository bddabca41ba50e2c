#include "tokenizer/tokenizer_added.h"

#include <algorithm>

#include "tokenizer/unicode_text.h"

namespace glint {

namespace {

// The code point that ends at byte `end` of valid UTF-8 `s` (REQUIRES: end > 0).
char32_t code_point_before(std::string_view s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return next_code_point(s, &b);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<const AddedToken*>& tokens,
                                     const std::vector<std::string>& patterns) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& p = patterns[i];
    if (p.empty()) continue;
    int node = 0;
    for (unsigned char b : p) {
      int c = child(node, b);
      if (c < 0) {
        c = nodes_++;
        edges_[(uint64_t(uint32_t(node)) << 8) | b] = c;
      }
      node = c;
    }
    terminal_.emplace(node, tokens[i]);  // the first of two identical patterns wins
    first_byte_[static_cast<unsigned char>(p[0])] = true;
  }
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>* out) const {
  size_t n = text.size();
  if (terminal_.empty() || n == 0) {
    out->push_back({0, n, -1});
    return;
  }
  size_t emitted = 0;  // end of what has been covered so far
  size_t pos = 0;      // where the search for the next match starts
  while (pos < n) {
    // Leftmost start with a match, then the longest match there.
    size_t start = pos;
    size_t best_end = 0;
    const AddedToken* best = nullptr;
    for (; start < n; ++start) {
      if (!first_byte_[static_cast<unsigned char>(text[start])]) continue;
      int node = 0;
      for (size_t i = start; i < n; ++i) {
        node = child(node, static_cast<unsigned char>(text[i]));
        if (node < 0) break;
        auto t = terminal_.find(node);
        if (t != terminal_.end()) best = t->second, best_end = i + 1;
      }
      if (best != nullptr) break;
    }
    if (best == nullptr) break;
    pos = best_end;  // the search resumes after the raw match, whatever the flags do
    size_t b = start, e = best_end;
    if (best->single_word) {
      bool word_before = b > 0 && is_word_code_point(code_point_before(text, b));
      size_t q = e;
      bool word_after = e < n && is_word_code_point(next_code_point(text, &q));
      if (word_before || word_after) continue;
    }
    if (best->lstrip) {
      size_t nb = b;
      while (nb > 0) {
        size_t q = nb - 1;
        while (q > 0 && (static_cast<unsigned char>(text[q]) & 0xC0) == 0x80) --q;
        size_t r = q;
        if (!is_space_code_point(next_code_point(text, &r))) break;
        nb = q;
      }
      b = std::max(nb, emitted);
    }
    if (best->rstrip) {
      size_t q = e;
      while (q < n) {
        size_t r = q;
        if (!is_space_code_point(next_code_point(text, &r))) break;
        q = r;
      }
      e = q;
    }
    if (emitted < b) out->push_back({emitted, b, -1});
    out->push_back({b, e, best->id});
    emitted = e;
  }
  if (emitted < n) out->push_back({emitted, n, -1});
}

}  // namespace glint
