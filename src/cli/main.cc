// glint: fine-tune Mixture-of-Experts language models.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <vector>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "core/error.h"

namespace {

// libgomp reads OMP_WAIT_POLICY once, when it is loaded (before main). Its default
// spin-waiting keeps idle OpenMP workers on the cores that OpenBLAS's own threads need
// for every GEMM; passive waiting made a training step 1.5x faster on 2 cores
// (docs/BENCHMARKS.md). So unless the user chose a policy, set it and exec ourselves.
void ensure_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: run on with the default
}

}  // namespace

int main(int argc, char** argv) {
  ensure_passive_openmp(argv);
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
  add(glint::cli::add_launch);
  add(glint::cli::add_data);
  add(glint::cli::add_template);
  add(glint::cli::add_tokenize);
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
