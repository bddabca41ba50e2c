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
  explicit MetricsWriter(const std::string& path);  // truncates an existing file
  ~MetricsWriter();
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

// A one-line progress bar on a terminal (stderr); silent elsewhere.
class Progress {
 public:
  explicit Progress(int64_t total);
  void update(int64_t done, const std::string& status);
  void finish();
  // Prints a full line, keeping the bar below it.
  void line(const std::string& text);
  bool interactive() const { return tty_; }

 private:
  int64_t total_;
  bool tty_;
  bool drawn_ = false;
};

}  // namespace glint
