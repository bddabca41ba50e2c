// glint launch -n N [--master-port P] -- CMD ...: N local ranks with the torchrun
// environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
#include <CLI/CLI.hpp>

#include <memory>

#include "cli/commands.h"
#include "dist/launcher.h"

namespace glint::cli {

Action add_launch(CLI::App& app) {
  auto o = std::make_shared<LaunchOptions>();
  CLI::App* cmd = app.add_subcommand("launch", "run N local ranks of a command (torchrun-style)");
  cmd->add_option("-n,--nproc", o->nproc, "number of ranks")->required();
  cmd->add_option("--master-port", o->master_port, "rendezvous port (default: a free one)");
  cmd->add_option("--master-addr", o->master_addr, "rendezvous address")->capture_default_str();
  cmd->add_option("command", o->command, "command to run, after --")->required();
  return [o]() { return launch(*o); };
}

}  // namespace glint::cli
