// `--config FILE.toml` for subcommands: the file's `key = value` lines become
// `--key=value` arguments placed before the command line's own, so flags given on the
// command line override the file. Keys are flag names without the leading dashes.
#pragma once

#include <string>
#include <vector>

namespace glint::cli {

// Replaces `--config FILE` / `--config=FILE` in args (everything after the subcommand)
// with the file's settings. Throws glint::Error naming the file for an unreadable file,
// a malformed line, or a section ([table]) the commands do not have.
std::vector<std::string> expand_config_file(const std::vector<std::string>& args);

}  // namespace glint::cli
