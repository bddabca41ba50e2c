#include "core/staged_dir.h"

#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"

namespace glint {

namespace fs = std::filesystem;

StagedDir::StagedDir(const std::string& output, const std::string& what)
    : output_(fs::path(output).lexically_normal()), what_(what) {
  if (output_.filename().empty()) output_ = output_.parent_path();  // "out/" -> "out"
  // A sibling, so that the final rename stays on one file system.
  const std::string pid = std::to_string(::getpid()), name = output_.filename().string();
  staging_ = output_.parent_path() / ("." + name + ".staged." + pid);
  replaced_ = output_.parent_path() / ("." + name + ".replaced." + pid);
  std::error_code ec;
  fs::remove_all(staging_, ec);
  make_dirs(staging_.string());
}

StagedDir::~StagedDir() {
  std::error_code ec;
  if (!committed_) fs::remove_all(staging_, ec);
}

void StagedDir::commit() {
  std::error_code ec;
  const bool existed = fs::exists(output_, ec);
  if (existed) {
    fs::remove_all(replaced_, ec);
    fs::rename(output_, replaced_, ec);
    GLINT_CHECK(!ec, output_.string(), ": cannot move the existing directory aside to ", replaced_.string(), " (",
                ec.message(), "); nothing was changed");
  }
  fs::rename(staging_, output_, ec);
  if (ec) {
    std::error_code restore;
    if (existed) fs::rename(replaced_, output_, restore);
    fail(output_.string(), ": cannot rename ", what_, " from ", staging_.string(), " (", ec.message(), ")");
  }
  committed_ = true;
  if (existed) fs::remove_all(replaced_, ec);
}

}  // namespace glint
