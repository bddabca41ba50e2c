// Filesystem helpers: whole-file reads, atomic writes, JSON files with located errors.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <string>

namespace glint {

// Reads a whole file. Throws glint::Error naming the path when it cannot be read.
std::string read_file(const std::string& path);

// Parses a JSON file. Errors name the path and the parser's position.
nlohmann::json read_json_file(const std::string& path);

// Writes `path` atomically: `write` fills "<path>.tmp.<pid>", which is fsync'ed and
// renamed over `path`. On any failure the temp file is removed and `path` untouched.
void write_file_atomic(const std::string& path,
                       const std::function<void(std::FILE*)>& write);
void write_text_atomic(const std::string& path, const std::string& text);

// mkdir -p. Throws glint::Error naming the path on failure.
void make_dirs(const std::string& path);

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);  // false when it does not exist

// A 64-bit checksum of the file's bytes, as 16 hex digits: it detects corruption (a
// flipped bit, a truncated or swapped file), it is no cryptographic hash. Reads the file
// in 1 MiB blocks. Throws glint::Error naming the path when it cannot be read.
std::string file_checksum(const std::string& path);

}  // namespace glint
