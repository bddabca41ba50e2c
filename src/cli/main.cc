// glint: fine-tune Mixture-of-Experts language models.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <vector>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"glint: fine-tune Mixture-of-Experts language models (LoRA and full)"};
  app.require_subcommand(0, 1);
  std::vector<std::pair<CLI::App*, glint::cli::Action>> actions;
  auto add = [&](glint::cli::Action (*f)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    glint::cli::Action a = f(app);
    actions.emplace_back(app.get_subcommands({})[before], std::move(a));
  };
  add(glint::cli::add_train);
  add(glint::cli::add_init_model);
  add(glint::cli::add_bench);
  try {
    // CLI11 parses in reverse order; expand --config of the subcommand first.
    std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && args[0] == "train") {
      std::vector<std::string> sub(args.begin() + 1, args.end());
      sub = glint::cli::expand_config_file(sub);
      args.resize(1);
      args.insert(args.end(), sub.begin(), sub.end());
    }
    std::reverse(args.begin(), args.end());
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const glint::Error& e) {  // e.g. a bad --config file
    std::cerr << "glint: error: " << e.what() << "\n";
    return 1;
  }
  try {
    for (auto& [sub, action] : actions)
      if (sub->parsed()) return action();
    std::cout << app.help();
    return 0;
  } catch (const glint::Error& e) {
    std::cerr << "glint: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "glint: internal error: " << e.what() << "\n";
    return 2;
  }
}
