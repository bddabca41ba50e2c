#include "core/fs.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

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
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
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

bool is_directory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

namespace {
// One 64-bit word into the running state: multiply-rotate mixing (the 64-bit golden
// ratio and a large odd constant), so every input bit reaches every state bit.
inline uint64_t mix(uint64_t h, uint64_t w) {
  w *= 0xC2B2AE3D27D4EB4Full;
  w = (w << 31) | (w >> 33);
  w *= 0x9E3779B97F4A7C15ull;
  h ^= w;
  h = (h << 27) | (h >> 37);
  return h * 5 + 0x52DCE729;
}
}  // namespace

std::string file_checksum(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  GLINT_CHECK(f, path, ": cannot open for reading (", std::strerror(errno), ")");
  std::vector<unsigned char> buf(1 << 20);
  uint64_t h = 0x243F6A8885A308D3ull, total = 0;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    total += n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, buf.data() + i, 8);
      h = mix(h, w);
    }
    uint64_t tail = 0;  // a block's last bytes (only the file's last block has any: 1 MiB is a multiple of 8)
    for (size_t k = 0; i + k < n; ++k) tail |= uint64_t(buf[i + k]) << (8 * k);
    if (i < n) h = mix(h, tail);
  }
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  GLINT_CHECK(!failed, path, ": read failed");
  h = mix(h, total);
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace glint
