// Subcommands of glint. Each adds itself to the app and returns the action to run when
// it was selected.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace glint::cli {

using Action = std::function<int()>;

// A subcommand of glint: its name and the one line `glint --help` gives it.
struct CommandSummary {
  const char* name;
  const char* summary;
};

// Every subcommand of glint, in the order `glint --help` lists them (commands.cc): the
// one home of their summaries, so that the glint front, which links no libtorch, lists
// the commands it hands to glint-core in their own words (cli/command_line.h).
const std::vector<CommandSummary>& command_summaries();

// The summary of subcommand `name`. REQUIRES: command_summaries() lists it.
const char* command_summary(const std::string& name);

// Adds subcommand `name` to `app` with its summary; each add_* below starts with it.
CLI::App* add_command(CLI::App& app, const std::string& name);

Action add_train(CLI::App& app);
// The arguments of `glint train` (after its name) with `--resume PATH` and no --config:
// the resumed run's config.toml goes first, so the run continues with its own settings
// and the command line's flags override them.
std::vector<std::string> with_resumed_config(const std::vector<std::string>& args);
Action add_init_model(CLI::App& app);
// glint merge (src/cli/merge_cmd.cc).
Action add_merge(CLI::App& app);
Action add_bench(CLI::App& app);
Action add_launch(CLI::App& app);
Action add_data(CLI::App& app);
// glint template (src/cli/template_cmd.cc).
Action add_template(CLI::App& app);
// glint tokenize (src/cli/tokenize_cmd.cc).
Action add_tokenize(CLI::App& app);
// glint generate (src/cli/generate_cmd.cc).
Action add_generate(CLI::App& app);
// glint serve (src/cli/serve_cmd.cc).
Action add_serve(CLI::App& app);
// glint plot (src/cli/plot_cmd.cc).
Action add_plot(CLI::App& app);
// glint export (src/cli/export_cmd.cc).
Action add_export(CLI::App& app);
// Adds `bench tokenize` under `bench`; *action runs it when that subcommand was parsed.
CLI::App* add_bench_tokenize(CLI::App& bench, Action* action);

// Adds `bench loss` under `bench`.
CLI::App* add_bench_loss(CLI::App& bench, Action* action);
// Adds `bench decode` under `bench` (cached decoding's time per new token).
CLI::App* add_bench_decode(CLI::App& bench, Action* action);

// Adds `bench tenants` (and its per-configuration `bench tenants-run`) under `bench`.
CLI::App* add_bench_tenants(CLI::App& bench, Action* action);

}  // namespace glint::cli
