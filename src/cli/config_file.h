// `--config FILE.toml` for subcommands: the file's `key = value` lines become
// `--key=value` arguments placed before the command line's own, so flags given on the
// command line override the file. Keys are the subcommand's long flag names without the
// leading dashes, with '_' and '-' alike (`micro_batch_size` == `micro-batch-size`).
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace glint::cli {

// Replaces `--config FILE` / `--config=FILE` in args (everything after the subcommand's
// name) with the file's settings, checked against the options of `cmd` (that
// subcommand). Throws glint::UsageError naming the file for: a missing or unparsable
// file; a section ([table]); a key that is no configurable option of cmd (with the
// closest valid key); a value that does not convert to the option's type (INT, UINT,
// FLOAT, BOOLEAN, or a flag's true/false); a `config` key. Special keys: `tenant = [..]`
// becomes one `--tenant=SPEC` per entry; other arrays are joined with commas; an empty
// value is skipped (the option keeps its default).
std::vector<std::string> expand_config_file(const std::vector<std::string>& args, const CLI::App& cmd);

}  // namespace glint::cli
