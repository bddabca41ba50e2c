#include "core/fs.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace glint {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GLINT_CHECK(in, path, ": cannot open for reading (", std::strerror(errno), ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  GLINT_CHECK(!in.bad(), path, ": read failed");
  return ss.str();
}

nlohmann::json read_json_file(const std::string& path) {
  std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
}

void write_file_atomic(const std::string& path,
                       const std::function<void(std::FILE*)>& write) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  GLINT_CHECK(f, path, ": cannot open '", tmp, "' for writing (", std::strerror(errno), ")");
  try {
    write(f);
    GLINT_CHECK(std::fflush(f) == 0, path, ": write failed (", std::strerror(errno), ")");
    GLINT_CHECK(::fsync(::fileno(f)) == 0, path, ": fsync failed (", std::strerror(errno), ")");
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  bool closed = std::fclose(f) == 0;
  if (!closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    fail(path, ": cannot finish writing (", std::strerror(err), ")");
  }
}

void write_text_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, [&](std::FILE* f) {
    GLINT_CHECK(std::fwrite(text.data(), 1, text.size(), f) == text.size(), path,
                ": write failed (", std::strerror(errno), ")");
  });
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  GLINT_CHECK(!ec, path, ": cannot create directory (", ec.message(), ")");
}

bool path_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

}  // namespace glint
