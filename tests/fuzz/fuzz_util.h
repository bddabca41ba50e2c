// What the libFuzzer targets (tests/fuzz/*_fuzz.cc, run by scripts/fuzz.sh) share.
//
// A target hands its input to the entry point glint itself uses for that kind of input
// (a file is written to this process's scratch directory and loaded as glint loads it).
// glint::Error is the expected answer to a malformed input and is caught by the target;
// anything else is a bug that libFuzzer reports: another exception type (it escapes and
// aborts), a broken contract (check() aborts), a sanitizer report, a leak, a run over
// -timeout, or memory over -rss_limit_mb / -malloc_limit_mb (an allocation a header
// asked for before glint checked it).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>

namespace glint::fuzz {

namespace detail {
inline std::string& scratch_path() {
  static std::string path;
  return path;
}
inline void remove_scratch() {
  std::error_code ec;
  std::filesystem::remove_all(scratch_path(), ec);
}
}  // namespace detail

// A directory of this process's own under $TMPDIR (or /tmp), removed at exit.
inline const std::string& scratch_dir() {
  std::string& path = detail::scratch_path();
  if (path.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp && *tmp ? tmp : "/tmp") + "/glint-fuzz-" + std::to_string(::getpid());
    std::filesystem::create_directories(path);
    std::atexit(detail::remove_scratch);
  }
  return path;
}

// Writes `bytes` to scratch_dir()/name (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

// A contract glint states about a successful (or refused) call: its failure is a bug.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: broken contract: %s\n", what);
    std::abort();
  }
}

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    unsigned cp;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
    else return false;
    if (i + n >= s.size()) return false;  // the sequence runs past the end
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
      return false;
    i += n + 1;
  }
  return true;
}

// The part of `input` before the first `separator`, and the part after it (empty when
// there is no separator): targets that read two files take them from one input.
inline std::pair<std::string_view, std::string_view> split(std::string_view input, std::string_view separator) {
  const size_t at = input.find(separator);
  if (at == std::string_view::npos) return {input, {}};
  return {input.substr(0, at), input.substr(at + separator.size())};
}

}  // namespace glint::fuzz
