// Sequence length: the automatic --seq-len, and cutting samples to a length with a
// report of what the cut cost (never silent).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/sample.h"

namespace glint {

// What fit_to_length did to a set of samples.
struct LengthReport {
  int64_t seq_len = 0;        // the length applied
  int64_t samples = 0;        // samples kept
  int64_t longest = 0;        // tokens of the longest sample before the cut
  int64_t longest_line = 0;   // its data line (0: not from a file)
  int64_t cut = 0;            // samples longer than seq_len, cut to it
  int64_t cut_tokens = 0;     // tokens removed by cutting
  int64_t cut_trained = 0;    // trained tokens (labels) among them
  int64_t lost = 0;           // samples that lost every trained token: dropped
  std::vector<int64_t> lost_lines;  // their data lines, the first kMaxLines of them
  static constexpr size_t kMaxLines = 10;

  // "1,234 samples, longest 5,000 tokens (line 17); 12 cut to 4,096 (3,210 tokens, 1,100
  // trained, lost)"; "none cut" when nothing was.
  std::string summary() const;
  // A warning naming the lines of the samples that lost everything, or "".
  std::string lost_warning(const std::string& path) const;
};

// Tokens of the longest sample (0 for none); *line gets its data line when non-null.
int64_t longest_sample(const std::vector<Sample>& samples, int64_t* line = nullptr);

// The automatic sequence length: the longest sample rounded up to a multiple of 8,
// capped by the model's max_position_embeddings (when > 0), at least 2.
int64_t automatic_seq_len(int64_t longest, int64_t max_positions);

// The sequence length to use: `requested` when > 0, else automatic_seq_len(longest,
// max_positions). *line gets the report: "--seq-len 824 (automatic: the longest sample,
// 817 tokens at data.jsonl:17, rounded up to a multiple of 8)"; `where` names the longest.
int64_t choose_seq_len(int64_t requested, int64_t longest, const std::string& where, int64_t max_positions,
                       std::string* line);

// Cuts every sample longer than seq_len to its first seq_len tokens and drops those left
// with no trained label after the model's shift (labels[1:] all kIgnoreIndex), keeping
// the others in order. REQUIRES: seq_len >= 2.
LengthReport fit_to_length(std::vector<Sample>* samples, int64_t seq_len);

}  // namespace glint
