#include "tokenizer/tokenizer_pretokenizer.h"

namespace glint {

std::shared_ptr<const TokenizerRegex> PreTokenizer::gpt2_regex() {
  static const std::shared_ptr<const TokenizerRegex> re = std::make_shared<TokenizerRegex>(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", false,
      "ByteLevel pre-tokenizer");
  return re;
}

void PreTokenizer::apply_split(const TokenizerRegex& re, SplitBehavior behavior, bool invert,
                               std::string_view piece, PreTokenizeScratch* s) const {
  // Segments covering the piece, matches and gaps alternating.
  using Seg = PreTokenizeScratch::Segment;
  s->matches.clear();
  re.find_all(piece, &s->matches);
  std::vector<Seg>& segs = s->segments;
  segs.clear();
  size_t prev = 0;
  for (const auto& [b, e] : s->matches) {
    if (prev != b) segs.push_back({prev, b, invert});
    segs.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != piece.size()) segs.push_back({prev, piece.size(), invert});

  auto emit = [&](size_t b, size_t e) {
    if (e > b) s->next.push_back(piece.substr(b, e - b));
  };
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Seg& g : segs) emit(g.begin, g.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Seg& g : segs)
        if (!g.match) emit(g.begin, g.end);
      break;
    case SplitBehavior::kContiguous: {
      // Runs of adjacent segments with the same role become one piece.
      size_t i = 0;
      while (i < segs.size()) {
        size_t j = i;
        while (j + 1 < segs.size() && segs[j + 1].match == segs[i].match) ++j;
        emit(segs[i].begin, segs[j].end);
        i = j + 1;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      // A match joins the piece before it (unless that piece was itself a match).
      std::vector<std::pair<size_t, size_t>> out;
      bool prev_match = false;
      for (const Seg& g : segs) {
        if (g.match && !prev_match && !out.empty()) out.back().second = g.end;
        else out.emplace_back(g.begin, g.end);
        prev_match = g.match;
      }
      for (const auto& [b, e] : out) emit(b, e);
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // A match joins the piece after it (unless that piece is itself a match).
      std::vector<std::pair<size_t, size_t>> out;
      bool prev_match = false;
      for (size_t k = segs.size(); k-- > 0;) {
        const Seg& g = segs[k];
        if (g.match && !prev_match && !out.empty()) out.back().first = g.begin;
        else out.emplace_back(g.begin, g.end);
        prev_match = g.match;
      }
      for (size_t k = out.size(); k-- > 0;) emit(out[k].first, out[k].second);
      break;
    }
  }
}

void PreTokenizer::split(std::string_view text, PreTokenizeScratch* s) const {
  s->pieces.clear();
  s->arena.clear();
  if (!text.empty()) s->pieces.push_back(text);
  for (const PreTokenizerStep& step : steps_) {
    s->next.clear();
    for (std::string_view piece : s->pieces) {
      if (step.kind == PreTokenizerStep::Kind::kSplit) {
        apply_split(*step.regex, step.behavior, step.invert, piece, s);
        continue;
      }
      if (step.add_prefix_space && piece[0] != ' ') {
        s->arena.push_back(" " + std::string(piece));
        piece = s->arena.back();
      }
      if (step.use_regex) apply_split(*gpt2_regex(), SplitBehavior::kIsolated, false, piece, s);
      else s->next.push_back(piece);
    }
    s->pieces.swap(s->next);
  }
}

}  // namespace glint
