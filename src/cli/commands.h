// Subcommands of the glint binary. Each adds itself to the app and returns the action
// to run when it was selected.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace glint::cli {

using Action = std::function<int()>;

Action add_train(CLI::App& app);
Action add_init_model(CLI::App& app);
Action add_bench(CLI::App& app);
Action add_launch(CLI::App& app);

}  // namespace glint::cli
