// Run-time reporting: metrics.jsonl records, peak memory, terminal progress.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdio>
#include <string>

namespace glint {

// Peak resident set size of this process so far, in MiB.
double peak_rss_mb();

// Appends one JSON object per line to a file; each line is flushed as it is written.
class MetricsWriter {
 public:
  // Truncates an existing file, or appends to it with `append` (a resumed run).
  explicit MetricsWriter(const std::string& path, bool append = false);
  ~MetricsWriter();
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

// A resumed run drops the records its checkpoint does not hold: rewrites the JSONL file
// `path` (atomically) without the records whose `key` exceeds `max`. Returns how many it
// dropped; 0 when the file does not exist.
int64_t drop_records_after(const std::string& path, const std::string& key, int64_t max);

// "45s", "3m12s", "2h05m", "3d04h".
std::string format_duration(double seconds);

// A one-line progress bar on a terminal (stderr); silent elsewhere. It keeps the time
// since it was made, and estimates the time left from the mean time per unit done.
class Progress {
 public:
  explicit Progress(int64_t total);
  // Draws "[=====>    ] done/total 1m02s<3m10s status".
  void update(int64_t done, const std::string& status);
  void finish();
  // Prints a full line, keeping the bar below it.
  void line(const std::string& text);
  bool interactive() const { return tty_; }
  double elapsed_seconds() const;
  // Seconds left at `done` of total (0 before any is done).
  double eta_seconds(int64_t done) const;
  // "1m02s elapsed, 3m10s left".
  std::string timing(int64_t done) const;

 private:
  int64_t total_;
  bool tty_;
  bool drawn_ = false;
  double start_;  // steady clock, seconds
};

}  // namespace glint
