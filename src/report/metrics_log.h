// Reading a metrics.jsonl back (train/metrics.h writes it): chosen numeric fields of
// every record as columns against the record's `step`, read incrementally.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace glint {

// One field over a run: (step, value) pairs in file order, finite values only.
struct MetricColumn {
  std::vector<double> step;
  std::vector<double> value;
  bool empty() const { return step.empty(); }
};

// The records of one metrics.jsonl. refresh() reads only what was appended since the
// last call, so a caller that keeps the log (a trainer drawing its report at every log
// interval) pays for the new lines, not for the whole run again. A file that was
// replaced (another inode) or shortened (a resumed run drops the records after its
// checkpoint) is read again from the start.
//
// Lines that are not a JSON object with a numeric `step` (a line cut short by a crash)
// are skipped and counted. A field whose value is null (how a NaN is written), not a
// number, or not finite is skipped and counted per field.
class MetricsLog {
 public:
  MetricsLog(std::string path, std::vector<std::string> fields);

  // Reads the lines appended since the last call. A last line without its newline is
  // taken when it parses (a crash right before the newline), otherwise left for the next
  // call (a writer in the middle of a line) and reported by pending_tail().
  // Throws glint::Error naming the path when the file cannot be opened or read.
  void refresh();

  const std::string& path() const { return path_; }
  // REQUIRES: `field` is one of the fields given to the constructor.
  const MetricColumn& column(const std::string& field) const;
  int64_t records() const { return records_; }
  double last_step() const { return last_step_; }
  // Lines skipped, and the 1-based number of the first of them (0 when none).
  int64_t bad_lines() const { return bad_lines_; }
  int64_t first_bad_line() const { return first_bad_line_; }
  // Values skipped per field (null, non-numeric, NaN or infinite); fields with none are absent.
  const std::map<std::string, int64_t>& bad_values() const { return bad_values_; }
  // The file ends with a part of a line that does not parse (yet).
  bool pending_tail() const { return pending_tail_; }

 private:
  void reset();
  void take_line(const char* begin, const char* end);

  std::string path_;
  std::vector<std::string> fields_;
  std::map<std::string, MetricColumn> columns_;
  std::map<std::string, int64_t> bad_values_;
  uint64_t inode_ = 0;
  int64_t offset_ = 0;  // bytes consumed: always at the start of a line
  int64_t line_no_ = 0;
  int64_t records_ = 0;
  double last_step_ = 0;
  int64_t bad_lines_ = 0;
  int64_t first_bad_line_ = 0;
  bool pending_tail_ = false;
  bool took_tail_ = false;  // the last refresh took a line whose newline had not come yet
};

}  // namespace glint
