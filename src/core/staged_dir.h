// A directory written whole or not at all: its files go into a hidden sibling, which
// commit() renames into place (over an existing one, which is moved aside and removed only
// once the new one stands). Without commit() the sibling is removed: a failure leaves the
// output as it was.
#pragma once

#include <filesystem>
#include <string>

namespace glint {

class StagedDir {
 public:
  // `what` names the content in errors ("the merged model", "the export").
  StagedDir(const std::string& output, const std::string& what);
  ~StagedDir();
  StagedDir(const StagedDir&) = delete;
  StagedDir& operator=(const StagedDir&) = delete;

  std::string dir() const { return staging_.string(); }
  // Puts the staged directory at the output. Throws glint::Error naming both paths when a
  // rename fails, leaving the previous output in place.
  void commit();

 private:
  std::filesystem::path output_, staging_, replaced_;
  std::string what_;
  bool committed_ = false;
};

}  // namespace glint
