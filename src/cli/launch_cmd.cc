// glint launch [--nnodes N --node-rank K --master-addr A] -n PER_NODE [--master-port P]
// -- CMD ...: this node's ranks with the torchrun environment (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT).
#include <CLI/CLI.hpp>

#include <memory>

#include "cli/commands.h"
#include "dist/launcher.h"

namespace glint::cli {

Action add_launch(CLI::App& app) {
  auto o = std::make_shared<LaunchOptions>();
  CLI::App* cmd = add_command(app, "launch");
  cmd->add_option("-n,--nproc,--nproc-per-node", o->nproc, "ranks on this machine")->required();
  cmd->add_option("--nnodes", o->nnodes, "machines in the job, each running -n ranks")->capture_default_str();
  cmd->add_option("--node-rank", o->node_rank, "this machine's index, 0 to nnodes-1 (node 0 hosts the "
                                                "rendezvous)")->capture_default_str();
  cmd->add_option("--master-port", o->master_port,
                  "rendezvous port (default: a free one on one machine, 29500 across machines)");
  cmd->add_option("--master-addr", o->master_addr, "rendezvous address: node 0's, reachable from every node")
      ->capture_default_str();
  cmd->add_option("command", o->command, "command to run, after --")->required();
  return [o]() { return launch(*o); };
}

}  // namespace glint::cli
