#include "train/metrics.h"

#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace glint {

double peak_rss_mb() {
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "w");
  GLINT_CHECK(f_, path, ": cannot open for writing (", std::strerror(errno), ")");
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  std::string line = record.dump() + "\n";
  GLINT_CHECK(std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0,
              path_, ": write failed (", std::strerror(errno), ")");
}

Progress::Progress(int64_t total) : total_(total), tty_(::isatty(STDERR_FILENO)) {}

void Progress::update(int64_t done, const std::string& status) {
  if (!tty_) return;
  const int width = 30;
  int filled = total_ > 0 ? int(width * done / total_) : width;
  std::string bar(filled, '=');
  if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
  std::fprintf(stderr, "\r\033[K[%s] %lld/%lld %s", bar.c_str(), (long long)done,
               (long long)total_, status.c_str());
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
