#include "train/metrics.h"

#include <nlohmann/json.hpp>
#include <stdio_ext.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/fs.h"

namespace glint {

double peak_rss_mb() {
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  GLINT_CHECK(f_, path, ": cannot open for writing (", std::strerror(errno), ")");
}

int64_t drop_records_after(const std::string& path, const std::string& key, int64_t max) {
  if (!path_exists(path)) return 0;
  std::istringstream in(read_file(path));
  std::string kept;
  int64_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    // A line cut short by a crash is not a record: dropped as well.
    if (rec.is_discarded() || (rec.contains(key) && rec[key].is_number() && rec[key].get<int64_t>() > max)) {
      ++dropped;
      continue;
    }
    kept += line + "\n";
  }
  if (dropped > 0) write_text_atomic(path, kept);
  return dropped;
}

double last_record_number(const std::string& path, const std::string& key, double otherwise) {
  if (!path_exists(path)) return otherwise;
  std::istringstream in(read_file(path));
  double last = otherwise;
  for (std::string line; std::getline(in, line);) {
    if (line.find('"' + key + '"') == std::string::npos) continue;  // most lines, unparsed
    nlohmann::json rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!rec.is_object()) continue;
    auto it = rec.find(key);
    if (it != rec.end() && it->is_number() && std::isfinite(it->get<double>())) last = it->get<double>();
  }
  return last;
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  // Every record is flushed, so the file's size is where this one starts.
  struct stat before;
  const bool sized = ::fstat(::fileno(f_), &before) == 0;
  if (std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0) return;
  const int err = errno;
  // No part of the record stays: what did not reach the file leaves the stdio buffer (it
  // would be written at close), and what did is cut off, so the file holds whole records.
  __fpurge(f_);
  const bool cut = sized && ::ftruncate(::fileno(f_), before.st_size) == 0;
  std::clearerr(f_);
  fail(path_, ": write failed (", std::strerror(err), "); the records before it are kept",
       cut ? "" : ", and a partial last line, which a resume drops");
}

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::string format_duration(double seconds) {
  int64_t s = int64_t(std::max(0.0, seconds) + 0.5);
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%llds", (long long)s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  else if (s < 86400) std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
  else std::snprintf(buf, sizeof buf, "%lldd%02lldh", (long long)(s / 86400), (long long)(s % 86400 / 3600));
  return buf;
}

std::string format_number(double v, int decimals) {
  GLINT_ASSERT(decimals >= 0 && decimals <= 17, "format_number: ", decimals, " decimals");
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[400];  // a double's largest integer part has 309 digits
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  // A value that rounds to zero is written without a sign ("-0.0000" is "0.0000").
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  const size_t first = s[0] == '-' ? 1 : 0;
  const size_t point = std::min(s.find('.'), s.size());
  for (size_t at = point; at > first + 3; at -= 3) s.insert(at - 3, ",");
  return s;
}

Progress::Progress(int64_t total, double earlier_seconds)
    : total_(total), tty_(::isatty(STDERR_FILENO)), earlier_(std::max(0.0, earlier_seconds)), start_(now_seconds()) {}

double Progress::elapsed_seconds() const { return now_seconds() - start_; }

double Progress::eta_seconds(int64_t done) const {
  if (done <= 0 || total_ <= done) return 0;
  return elapsed_seconds() / double(done) * double(total_ - done);
}

std::string Progress::timing(int64_t done) const {
  return format_duration(run_seconds()) + " elapsed, " + format_duration(eta_seconds(done)) + " left";
}

void Progress::update(int64_t done, const std::string& status) {
  if (!tty_) return;
  const int width = 30;
  int filled = total_ > 0 ? int(width * done / total_) : width;
  std::string bar(filled, '=');
  if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
  std::fprintf(stderr, "\r\033[K[%s] %lld/%lld %s<%s %s", bar.c_str(), (long long)done, (long long)total_,
               format_duration(run_seconds()).c_str(), format_duration(eta_seconds(done)).c_str(),
               status.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::line(const std::string& text) {
  if (tty_ && drawn_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (tty_ && drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace glint
