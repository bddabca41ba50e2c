// Added tokens (special and not) found in text before it is split, the way
// `tokenizers`' AddedVocabulary finds them: leftmost-longest matches of the token
// contents, scanning on after each match, with the single_word / lstrip / rstrip flags.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace glint {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special_tokens)
  bool normalized = false;   // matched in normalized text (else in the raw input)
  bool lstrip = false;       // swallows whitespace on its left
  bool rstrip = false;       // swallows whitespace on its right
  bool single_word = false;  // matches only when not inside a word
};

// One segment of text: either an added token (id >= 0) or plain text (id == -1).
struct TextSegment {
  size_t begin, end;  // byte offsets into the text that was searched
  int32_t id;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is the text to search for token `tokens[i]` (its content, normalized
  // when the token is normalized). Empty patterns are ignored.
  AddedTokenMatcher(const std::vector<const AddedToken*>& tokens,
                    const std::vector<std::string>& patterns);

  bool empty() const { return terminal_.empty(); }

  // Appends segments that cover `text` in order (plain segments may be empty only when
  // `text` is). REQUIRES: text is valid UTF-8.
  void split(std::string_view text, std::vector<TextSegment>* out) const;

 private:
  int child(int node, unsigned char b) const {
    auto it = edges_.find((uint64_t(uint32_t(node)) << 8) | b);
    return it == edges_.end() ? -1 : it->second;
  }
  std::unordered_map<uint64_t, int> edges_;      // (node << 8 | byte) -> child node
  std::unordered_map<int, const AddedToken*> terminal_;  // node -> token ending there
  bool first_byte_[256] = {};
  int nodes_ = 1;  // node 0 is the root
};

}  // namespace glint
