// The pre-tokenizer of a byte-level BPE tokenizer.json: a sequence of Split steps
// (each with its own regex and delimiter behavior) ending in ByteLevel.
//
// A piece is a std::string_view into the caller's text or into the scratch arena;
// the BPE model then encodes each piece's bytes separately.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer_regex.h"

namespace glint {

// How a Split step treats the matches of its pattern (`tokenizers` SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  // kSplit: the pattern, the behavior, and whether matches and gaps swap roles.
  std::shared_ptr<const TokenizerRegex> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  // kByteLevel: prepend " " to a piece that does not start with one; split with the
  // GPT-2 regex first.
  bool add_prefix_space = false;
  bool use_regex = true;
};

// Per-call working memory (reused across calls to avoid allocations).
struct PreTokenizeScratch {
  struct Segment {
    size_t begin, end;  // byte offsets in the piece being split
    bool match;         // a match of the pattern (after `invert`)
  };
  std::vector<std::string_view> pieces, next;
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<Segment> segments;
  std::deque<std::string> arena;  // owns text created by add_prefix_space
};

class PreTokenizer {
 public:
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

  // Splits `text` (valid UTF-8, non-empty) into pieces, appended to s->pieces (cleared
  // first). Empty pieces are dropped, as `tokenizers` drops them. The views stay valid
  // while `text` and s->arena live.
  void split(std::string_view text, PreTokenizeScratch* s) const;

  // The GPT-2 regex that ByteLevel uses when use_regex is true.
  static std::shared_ptr<const TokenizerRegex> gpt2_regex();

 private:
  void apply_split(const TokenizerRegex& re, SplitBehavior behavior, bool invert,
                   std::string_view piece, PreTokenizeScratch* s) const;
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace glint
