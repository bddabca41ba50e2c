// Key names in configuration files: `micro_batch_size` and `micro-batch-size` name the
// same key, and a key that names nothing is reported with the valid key it most likely
// meant. Plain string functions, so that they are tested without the CLI.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace glint {

// The key as flags spell it: every '_' becomes '-' ("micro_batch_size" ->
// "micro-batch-size"). Case is kept: keys are case-sensitive like the flags.
std::string normalize_key(std::string_view key);

// Levenshtein distance: the fewest single-character insertions, deletions and
// substitutions that turn a into b.
size_t edit_distance(std::string_view a, std::string_view b);

// The entry of `valid` (normalised names) that `key` most likely meant, or "" when none
// is close. Compared case-insensitively after normalize_key, best first:
//   1. a typo: edit distance at most max(2, longer length / 3) ("setps" -> "steps");
//   2. initials: "learning_rate" -> "lr" (or "mbs" -> "micro-batch-size");
//   3. one contains the other, the shorter at least 3 characters ("batch" -> "batch-size").
// Ties go to the smaller edit distance, then to the earlier entry of `valid`.
std::string closest_key(std::string_view key, const std::vector<std::string>& valid);

}  // namespace glint
