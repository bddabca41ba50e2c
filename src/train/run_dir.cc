#include "train/run_dir.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace glint {

namespace fs = std::filesystem;

std::string new_run_dir(const std::string& parent) {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[64];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d_%H-%M-%S", &local);
  const std::string base = parent + "/" + stamp;
  std::error_code ec;
  std::string dir = base;
  for (int k = 2; fs::exists(dir, ec); ++k) dir = base + "-" + std::to_string(k);
  return dir;
}

std::string output_dir_problem(const std::string& dir, bool overwrite, const std::string& alternative) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return "";
  if (!fs::is_directory(dir, ec)) return "--output " + dir + " is a file, not a directory";
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir, ec)) entries.push_back(e.path().filename().string());
  if (ec) return "--output " + dir + ": cannot list the directory (" + ec.message() + ")";
  if (entries.empty() || overwrite) return "";
  std::sort(entries.begin(), entries.end());
  std::string some;
  for (size_t i = 0; i < entries.size() && i < 4; ++i) some += (i ? ", " : "") + entries[i];
  if (entries.size() > 4) some += ", ...";
  return "--output " + dir + " is not empty (" + some + "); nothing was written. Choose a new --output" +
         alternative + ", or pass --overwrite to write over it";
}

std::string run_dir_problem(const std::string& dir, bool overwrite) {
  if (run_dir_unstarted(dir)) return "";
  std::string problem =
      output_dir_problem(dir, overwrite, " (or leave it out: each run gets a new directory under runs/)");
  const std::string not_empty = "--output " + dir + " is not empty";
  if (problem.rfind(not_empty, 0) == 0) problem = "--output " + dir + " already holds a run" + problem.substr(not_empty.size());
  return problem;
}

bool run_dir_unstarted(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "config.toml" || name == "report.html" || name == "base-model") continue;
    if (name == "metrics.jsonl" && fs::is_regular_file(e.path(), ec) && fs::file_size(e.path(), ec) == 0) continue;
    if (name == "checkpoints" && fs::is_directory(e.path(), ec) && fs::is_empty(e.path(), ec)) continue;
    return false;
  }
  return !ec;
}

void remove_unstarted_run(const std::string& dir, bool keep_directory) {
  std::error_code ec;
  if (!keep_directory) {
    fs::remove_all(dir, ec);
    return;
  }
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir, ec)) entries.push_back(e.path());
  for (const fs::path& p : entries) fs::remove_all(p, ec);
}

int copy_tokenizer_files(const std::string& from, const std::string& to) {
  static const char* kFiles[] = {"tokenizer.json",     "tokenizer_config.json", "special_tokens_map.json",
                                 "vocab.json",         "merges.txt",            "tokenizer.model",     "tiktoken.model",
                                 "chat_template.jinja", "chat_template.json",   "generation_config.json"};
  int copied = 0;
  for (const char* name : kFiles) {
    std::error_code ec;
    const fs::path src = fs::path(from) / name;
    if (!fs::is_regular_file(src, ec)) continue;
    const fs::path dst = fs::path(to) / name, tmp = fs::path(to) / (std::string(name) + ".tmp");
    fs::copy_file(src, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(tmp, dst, ec);
    GLINT_CHECK(!ec, src.string(), ": cannot copy to ", to, " (", ec.message(), ")");
    ++copied;
  }
  return copied;
}

}  // namespace glint
