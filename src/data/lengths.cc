#include "data/lengths.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace glint {

namespace {

// 1234567 -> "1,234,567".
std::string grouped(int64_t n) {
  std::string s = std::to_string(n < 0 ? -n : n);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return n < 0 ? "-" + s : s;
}

bool trains(const Sample& s) {
  return s.labels.size() > 1 &&
         std::any_of(s.labels.begin() + 1, s.labels.end(), [](int64_t l) { return l != kIgnoreIndex; });
}

}  // namespace

int64_t longest_sample(const std::vector<Sample>& samples, int64_t* line) {
  int64_t best = 0, at = 0;
  for (const Sample& s : samples)
    if (int64_t(s.input_ids.size()) > best) {
      best = int64_t(s.input_ids.size());
      at = s.line;
    }
  if (line) *line = at;
  return best;
}

int64_t automatic_seq_len(int64_t longest, int64_t max_positions) {
  int64_t n = std::max<int64_t>(2, (longest + 7) / 8 * 8);
  if (max_positions > 0) n = std::min(n, max_positions);
  return std::max<int64_t>(2, n);
}

int64_t choose_seq_len(int64_t requested, int64_t longest, const std::string& where, int64_t max_positions,
                       std::string* line) {
  if (requested > 0) {
    *line = "--seq-len " + grouped(requested) + " (the longest sample has " + grouped(longest) + " tokens, " + where + ")";
    if (max_positions > 0 && requested > max_positions)
      *line += "; warning: beyond the model's max_position_embeddings " + grouped(max_positions);
    return requested;
  }
  const int64_t n = automatic_seq_len(longest, max_positions);
  *line = "--seq-len " + grouped(n) + " (automatic: the longest sample, " + grouped(longest) + " tokens at " + where +
          ", " +
          (max_positions > 0 && n == max_positions && longest > max_positions
               ? "capped at the model's max_position_embeddings)"
               : "rounded up to a multiple of 8)");
  return n;
}

LengthReport fit_to_length(std::vector<Sample>* samples, int64_t seq_len) {
  GLINT_ASSERT(seq_len >= 2, "seq_len ", seq_len);
  LengthReport r;
  r.seq_len = seq_len;
  r.longest = longest_sample(*samples, &r.longest_line);
  std::vector<Sample> kept;
  kept.reserve(samples->size());
  for (Sample& s : *samples) {
    const int64_t n = int64_t(s.input_ids.size());
    if (n > seq_len) {
      const bool trained_before = trains(s);
      ++r.cut;
      r.cut_tokens += n - seq_len;
      r.cut_trained += std::count_if(s.labels.begin() + seq_len, s.labels.end(),
                                     [](int64_t l) { return l != kIgnoreIndex; });
      s.input_ids.resize(size_t(seq_len));
      s.labels.resize(size_t(seq_len));
      if (trained_before && !trains(s)) {
        ++r.lost;
        if (r.lost_lines.size() < LengthReport::kMaxLines) r.lost_lines.push_back(s.line);
        continue;
      }
    }
    kept.push_back(std::move(s));
  }
  *samples = std::move(kept);
  r.samples = int64_t(samples->size());
  return r;
}

std::string LengthReport::summary() const {
  std::string s = grouped(samples) + (samples == 1 ? " sample" : " samples") + ", longest " + grouped(longest) + " tokens";
  if (longest_line > 0) s += " (line " + std::to_string(longest_line) + ")";
  if (cut == 0) return s + "; none cut at " + grouped(seq_len);
  s += "; " + grouped(cut) + " cut to " + grouped(seq_len) + " tokens (" + grouped(cut_tokens) + " tokens, " +
       grouped(cut_trained) + " of them trained, lost)";
  return s;
}

std::string LengthReport::lost_warning(const std::string& path) const {
  if (lost == 0) return "";
  std::string s = "warning: " + grouped(lost) + " sample" + (lost == 1 ? "" : "s") +
                  " lost every trained token to the cut at " + grouped(seq_len) + " tokens and " +
                  (lost == 1 ? "is" : "are") + " not trained: " + path + " line";
  s += lost_lines.size() == 1 ? " " : "s ";
  for (size_t i = 0; i < lost_lines.size(); ++i) s += (i ? ", " : "") + std::to_string(lost_lines[i]);
  if (int64_t(lost_lines.size()) < lost) s += ", ...";
  return s + " (raise --seq-len to keep them)";
}

}  // namespace glint
