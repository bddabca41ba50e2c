// Subcommands of the glint binary. Each adds itself to the app and returns the action
// to run when it was selected.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace glint::cli {

using Action = std::function<int()>;

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

// Adds `bench tenants` (and its per-configuration `bench tenants-run`) under `bench`.
CLI::App* add_bench_tenants(CLI::App& bench, Action* action);

}  // namespace glint::cli
