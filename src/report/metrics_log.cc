#include "report/metrics_log.h"

#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace glint {

MetricsLog::MetricsLog(std::string path, std::vector<std::string> fields)
    : path_(std::move(path)), fields_(std::move(fields)) {
  reset();
}

void MetricsLog::reset() {
  columns_.clear();
  for (const auto& f : fields_) columns_[f];
  bad_values_.clear();
  inode_ = 0;
  offset_ = line_no_ = records_ = bad_lines_ = first_bad_line_ = 0;
  last_step_ = 0;
  pending_tail_ = false;
  took_tail_ = false;
}

const MetricColumn& MetricsLog::column(const std::string& field) const {
  auto it = columns_.find(field);
  GLINT_ASSERT(it != columns_.end(), "metrics field '", field, "' was not asked for");
  return it->second;
}

void MetricsLog::take_line(const char* begin, const char* end) {
  ++line_no_;
  if (begin == end) return;  // an empty line is no record and no damage
  nlohmann::json rec = nlohmann::json::parse(begin, end, nullptr, /*allow_exceptions=*/false);
  auto step = rec.is_object() ? rec.find("step") : rec.end();
  if (!rec.is_object() || step == rec.end() || !step->is_number() || !std::isfinite(step->get<double>())) {
    if (bad_lines_++ == 0) first_bad_line_ = line_no_;
    return;
  }
  const double s = step->get<double>();
  ++records_;
  last_step_ = s;
  for (const auto& f : fields_) {
    auto it = rec.find(f);
    if (it == rec.end()) continue;
    const double v = it->is_number() ? it->get<double>() : NAN;
    if (!std::isfinite(v)) {
      ++bad_values_[f];
      continue;
    }
    MetricColumn& c = columns_[f];
    c.step.push_back(s);
    c.value.push_back(v);
  }
}

void MetricsLog::refresh() {
  struct stat st;
  GLINT_CHECK(::stat(path_.c_str(), &st) == 0, path_, ": cannot read metrics (", std::strerror(errno), ")");
  if (uint64_t(st.st_ino) != inode_ || int64_t(st.st_size) < offset_) reset();
  inode_ = uint64_t(st.st_ino);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path_.c_str(), "rb"), &std::fclose);
  GLINT_CHECK(f, path_, ": cannot open for reading (", std::strerror(errno), ")");
  GLINT_CHECK(std::fseek(f.get(), long(offset_), SEEK_SET) == 0, path_, ": cannot seek to byte ", offset_);
  // Blocks of 1 MiB; a line split across blocks is carried over in `buf`.
  std::string buf;
  std::vector<char> block(1 << 20);
  size_t n;
  while ((n = std::fread(block.data(), 1, block.size(), f.get())) > 0) {
    buf.append(block.data(), n);
    size_t start = 0;
    if (took_tail_ && buf[0] == '\n') {  // the newline of the line taken last time
      start = 1;
      offset_ += 1;
    }
    took_tail_ = false;
    for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      take_line(buf.data() + start, buf.data() + nl);
      offset_ += int64_t(nl + 1 - start);
    }
    buf.erase(0, start);
  }
  GLINT_CHECK(!std::ferror(f.get()), path_, ": read failed at byte ", offset_);
  pending_tail_ = false;
  if (!buf.empty()) {
    if (nlohmann::json::accept(buf)) {
      take_line(buf.data(), buf.data() + buf.size());
      offset_ += int64_t(buf.size());
      took_tail_ = true;
    } else {
      pending_tail_ = true;
    }
  }
}

}  // namespace glint
