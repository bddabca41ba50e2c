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

// The number `key` of the last record of the JSONL file `path` that holds it as a finite
// number; `otherwise` when none does or the file does not exist. Lines that do not parse
// are passed over.
double last_record_number(const std::string& path, const std::string& key, double otherwise);

// "45s", "3m12s", "2h05m", "3d04h".
std::string format_duration(double seconds);

// A number for a person to read: `decimals` digits after the point and the integer part
// grouped in thousands ("1,234,567", "12.0000", "-0.25"); "nan", "inf" and "-inf" for the
// values that are not finite. The report's figures and tick labels are written with it,
// each kind of quantity at one precision. REQUIRES: 0 <= decimals <= 17.
std::string format_number(double v, int decimals);

// A one-line progress bar on a terminal (stderr); silent elsewhere. It keeps the time
// since it was made, and estimates the time left from the mean time per unit done.
// `earlier_seconds` is the run's time before this process (a resumed run's): the
// elapsed time it shows and gives is the run's.
class Progress {
 public:
  explicit Progress(int64_t total, double earlier_seconds = 0);
  // Draws "[=====>    ] done/total 1m02s<3m10s status".
  void update(int64_t done, const std::string& status);
  void finish();
  // Prints a full line, keeping the bar below it.
  void line(const std::string& text);
  // Seconds since this Progress was made (this process's part of the run).
  double elapsed_seconds() const;
  // The run's seconds: earlier_seconds + elapsed_seconds().
  double run_seconds() const { return earlier_ + elapsed_seconds(); }
  // Seconds left at `done` of total (0 before any is done), at this process's pace.
  double eta_seconds(int64_t done) const;
  // "1m02s elapsed, 3m10s left": the run's elapsed time.
  std::string timing(int64_t done) const;

 private:
  int64_t total_;
  bool tty_;
  bool drawn_ = false;
  double earlier_;  // the run's seconds before this process
  double start_;    // steady clock, seconds
};

}  // namespace glint
