// glint: fine-tune Mixture-of-Experts language models.
#include <CLI/CLI.hpp>

#include <iostream>
#include <vector>

#include "cli/commands.h"
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
    app.parse(argc, argv);
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
