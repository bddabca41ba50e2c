#include "core/config_keys.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <utility>

namespace glint {

namespace {

std::string lower_normalized(std::string_view key) {
  std::string s = normalize_key(key);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The first letter of each '-' or '.' separated word of a normalised key; "" for a key
// of one word (its initial alone would match too much).
std::string initials(const std::string& key) {
  std::string out;
  bool word_start = true;
  for (char c : key) {
    if (c == '-' || c == '.') {
      word_start = true;
    } else if (word_start) {
      out += c;
      word_start = false;
    }
  }
  return out.size() >= 2 ? out : std::string();
}

}  // namespace

std::string normalize_key(std::string_view key) {
  std::string s(key);
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  // One row of the (|a|+1) x (|b|+1) table at a time.
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];  // table[i-1][j-1]
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];  // table[i-1][j]
      row[j] = std::min({above + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_key(std::string_view key, const std::vector<std::string>& valid) {
  const std::string k = lower_normalized(key);
  const std::string k_initials = initials(k);
  // (rank, distance) of the best entry so far; lower is better.
  std::pair<int, size_t> best{std::numeric_limits<int>::max(), 0};
  std::string best_name;
  for (const std::string& name : valid) {
    const std::string n = lower_normalized(name);
    const size_t d = edit_distance(k, n);
    const size_t shorter = std::min(k.size(), n.size());
    int rank;
    if (d <= std::max<size_t>(2, std::max(k.size(), n.size()) / 3) && d < std::max(k.size(), n.size())) {
      rank = 0;
    } else if ((!k_initials.empty() && k_initials == n) || (!initials(n).empty() && initials(n) == k)) {
      rank = 1;
    } else if (shorter >= 3 && (k.find(n) != std::string::npos || n.find(k) != std::string::npos)) {
      rank = 2;
    } else {
      continue;
    }
    if (std::make_pair(rank, d) < best) {
      best = {rank, d};
      best_name = name;
    }
  }
  return best_name;
}

}  // namespace glint
