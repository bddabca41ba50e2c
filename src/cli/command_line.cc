#include "cli/command_line.h"

#include <algorithm>
#include <iostream>
#include <stdexcept>

#include "core/error.h"

namespace glint::cli {

CommandLine::CommandLine(const std::map<std::string, AddCommand>& runs)
    : app_("glint: fine-tune Mixture-of-Experts language models (LoRA and full)", "glint") {
  app_.set_version_flag("--version", version_line(), "print the version of glint and of libtorch, and exit");
  app_.require_subcommand(0, 1);
  for (const CommandSummary& c : command_summaries()) {
    auto it = runs.find(c.name);
    if (it == runs.end()) {
      app_.add_subcommand(c.name, c.summary);
      continue;
    }
    const size_t before = app_.get_subcommands({}).size();
    Action action = it->second(app_);
    GLINT_ASSERT(app_.get_subcommands({}).size() == before + 1 && app_.get_subcommands({})[before]->get_name() == c.name,
                 "the add function of '", c.name, "' added another subcommand");
    actions_.emplace_back(app_.get_subcommands({})[before], std::move(action));
  }
  GLINT_ASSERT(actions_.size() == runs.size(), "a command to run that command_summaries() does not list");
}

int CommandLine::run(std::vector<std::string> args, const Prepare& prepare) {
  try {
    if (prepare) args = prepare(std::move(args));
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    app_.parse(args);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; every other parse error is a usage error
    // (CLI11's own codes, 104 to 115, would tell a script nothing more).
    int code = app_.exit(e);
    return code == static_cast<int>(CLI::ExitCodes::Success) ? 0 : kExitUsage;
  } catch (const UsageError& e) {  // e.g. a bad --config file
    std::cerr << "glint: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const Error& e) {
    std::cerr << "glint: error: " << e.what() << "\n";
    return kExitFailure;
  }
  try {
    for (auto& [sub, action] : actions_)
      if (sub->parsed()) return action();
    for (CLI::App* sub : app_.get_subcommands({}))
      GLINT_ASSERT(!sub->parsed(), "glint ", sub->get_name(), " is not run by this executable");
    std::cout << app_.help();
    return 0;
  } catch (const UsageError& e) {  // options that do not fit together, found by the command
    std::cerr << "glint: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const Error& e) {
    std::cerr << "glint: error: " << e.what() << "\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << "glint: internal error: " << e.what() << "\n";
    return kExitInternal;
  }
}

std::string selected_command(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a.empty() || a[0] != '-') return a;
  return "";
}

}  // namespace glint::cli
