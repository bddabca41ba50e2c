// glint's command line, shared by its two executables:
//   glint       links no libtorch; runs --version, --help and the commands that load no
//               model (launch, plot, template, tokenize), and hands every other command
//               to glint-core by execv with the same arguments (src/cli/front_main.cc)
//   glint-core  links libtorch and runs every command (src/cli/main.cc)
// Both build the same top-level app from command_summaries() (cli/commands.h), so a
// command line means the same to either.
//
// Exit status:
//   0  success; also --help and --version
//   1  the work failed (glint::Error: a bad data line, a model that does not load, ...)
//   2  usage: the command line or a --config file is wrong (a CLI11 parse error such as
//      an unknown flag, a value of the wrong type or a missing required option;
//      glint::UsageError); nothing heavy has run
//   3  internal error: any other exception (a bug in glint)
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"

namespace glint::cli {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInternal = 3;

// "glint 0.3.0 (libtorch 1.13.0, v0.3.0-5-gabc1234-dirty)" (src/cli/version.cc).
std::string version_line();

// Adds one subcommand to the app and returns what runs it (commands.h).
using AddCommand = Action (*)(CLI::App&);

// The top-level app (--help, --version and at most one subcommand) and the action of
// each subcommand this executable runs.
class CommandLine {
 public:
  // Every subcommand of command_summaries(), in that order: through its add function
  // where `runs` has one, by name and summary alone (for --help) where it has none.
  // REQUIRES: a command line that selects a subcommand of the second kind never reaches
  // run() (the front hands it to glint-core first).
  explicit CommandLine(const std::map<std::string, AddCommand>& runs);
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  CLI::App& app() { return app_; }

  // Rewrites the arguments before they are parsed (glint-core: train's --config file).
  using Prepare = std::function<std::vector<std::string>(std::vector<std::string>)>;

  // Parses `args` (argv after the program's name), rewritten by `prepare` when given,
  // runs the selected subcommand and returns the exit status above; errors are printed
  // to stderr as "glint: error: ...".
  int run(std::vector<std::string> args, const Prepare& prepare = nullptr);

 private:
  CLI::App app_;
  std::vector<std::pair<CLI::App*, Action>> actions_;
};

// The subcommand that `args` (argv after the program's name) select: the first argument
// that is not an option, since glint's own options (--help, --version) take no value;
// "" when every argument is an option.
std::string selected_command(const std::vector<std::string>& args);

}  // namespace glint::cli
