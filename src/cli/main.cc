// glint-core: every command of glint, with libtorch. Users run glint (front_main.cc),
// which runs the commands that load no model itself and hands the others to this
// executable with the same arguments; run directly, it behaves the same.
// Exit status: src/cli/command_line.h.
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/config_file.h"
#include "core/process_settings.h"

int main(int argc, char** argv) {
  using namespace glint::cli;
  // Run directly rather than through glint: the settings its libraries read as they
  // loaded, if they were missing (core/process_settings.h).
  glint::restart_with_process_settings(argv);
  CommandLine command_line({
      {"train", add_train},
      {"init-model", add_init_model},
      {"merge", add_merge},
      {"export", add_export},
      {"bench", add_bench},
      {"launch", add_launch},
      {"data", add_data},
      {"template", add_template},
      {"tokenize", add_tokenize},
      {"generate", add_generate},
      {"serve", add_serve},
      {"plot", add_plot},
  });
  // CLI11 parses in reverse order; expand --config of the subcommand first.
  auto expand_train_config = [&](std::vector<std::string> args) {
    if (!args.empty() && args[0] == "train") {
      std::vector<std::string> sub(args.begin() + 1, args.end());
      sub = expand_config_file(with_resumed_config(sub), *command_line.app().get_subcommand("train"));
      args.resize(1);
      args.insert(args.end(), sub.begin(), sub.end());
    }
    return args;
  };
  return command_line.run(std::vector<std::string>(argv + 1, argv + argc), expand_train_config);
}
