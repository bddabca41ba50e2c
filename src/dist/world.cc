#include "dist/world.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace glint {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, int min_value) {
  const char* v = env(name);
  GLINT_ASSERT(v);
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  GLINT_CHECK(end != v && *end == '\0' && n >= min_value && n < (1L << 30), "environment variable ",
              name, "='", v, "' is not an integer >= ", min_value);
  return int(n);
}

int env_int_or(const char* name, int fallback, int min_value) {
  return env(name) ? env_int(name, min_value) : fallback;
}

}  // namespace

World World::from_env() {
  World w;
  if (env("RANK") || env("WORLD_SIZE")) {
    GLINT_CHECK(env("RANK") && env("WORLD_SIZE"), "environment: RANK and WORLD_SIZE must be set together");
    w.launcher = env("GLINT_LAUNCH") ? "glint" : "torchrun";
    w.rank = env_int("RANK", 0);
    w.world_size = env_int("WORLD_SIZE", 1);
    w.local_rank = env_int_or("LOCAL_RANK", w.rank, 0);
    w.local_world_size = env_int_or("LOCAL_WORLD_SIZE", w.world_size, 1);
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    w.launcher = "openmpi";
    w.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    w.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    w.local_rank = env_int_or("OMPI_COMM_WORLD_LOCAL_RANK", 0, 0);
    w.local_world_size = env_int_or("OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1);
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    w.launcher = "slurm";
    w.rank = env_int("SLURM_PROCID", 0);
    w.world_size = env_int("SLURM_NTASKS", 1);
    w.local_rank = env_int_or("SLURM_LOCALID", 0, 0);
    // SLURM_NTASKS_PER_NODE (set with --ntasks-per-node) or SLURM_TASKS_PER_NODE (always
    // set by srun) may read "4(x2)"; the leading number is this node's count.
    const char* per_node = env("SLURM_NTASKS_PER_NODE");
    if (!per_node) per_node = env("SLURM_TASKS_PER_NODE");
    w.local_world_size = per_node ? std::max(1, std::atoi(per_node)) : 1;
  }
  if (const char* a = env("MASTER_ADDR")) w.master_addr = a;
  else GLINT_CHECK(w.world_size == 1 || w.launcher != "slurm",
                   "environment: under Slurm, set MASTER_ADDR to the first node's address");
  w.master_port = env_int_or("MASTER_PORT", 29500, 1);
  GLINT_CHECK(w.master_port < 65536, "environment variable MASTER_PORT=", w.master_port,
              " is not a TCP port");
  GLINT_CHECK(w.rank < w.world_size, "environment (", w.launcher, "): rank ", w.rank,
              " is not below the world size ", w.world_size);
  GLINT_CHECK(w.local_rank < w.local_world_size, "environment (", w.launcher, "): local rank ",
              w.local_rank, " is not below the local world size ", w.local_world_size);
  GLINT_CHECK(w.world_size % w.local_world_size == 0, "environment (", w.launcher, "): the world size ",
              w.world_size, " is not a multiple of the ranks per node (", w.local_world_size,
              "); glint needs the same number of ranks on every node");
  w.num_nodes = w.world_size / w.local_world_size;
  w.node = w.node_of(w.rank);
  const char* group = w.launcher == "torchrun" || w.launcher == "glint" ? "GROUP_RANK" : w.launcher == "slurm" ? "SLURM_NODEID" : nullptr;
  if (group && env(group)) {
    int n = env_int(group, 0);
    GLINT_CHECK(n == w.node, "environment (", w.launcher, "): ", group, "=", n, " but rank ", w.rank, " with ",
                w.local_world_size, " ranks per node is on node ", w.node,
                "; glint needs ranks numbered node by node");
  }
  return w;
}

nlohmann::json World::launch_json() const {
  return nlohmann::json{{"launcher", launcher},
                        {"world_size", world_size},
                        {"nproc_per_node", local_world_size},
                        {"nnodes", num_nodes},
                        {"master_addr", master_addr}};
}

std::string launch_command_line(const nlohmann::json& j, const std::string& command) {
  if (!j.is_object() || !j.value("launcher", nlohmann::json()).is_string()) return command;
  const std::string launcher = j["launcher"];
  const int world = j.value("world_size", 1), per_node = j.value("nproc_per_node", world), nodes = j.value("nnodes", 1);
  const std::string addr = j.value("master_addr", std::string("127.0.0.1"));
  const std::string n = std::to_string(per_node);
  if (launcher == "glint") {
    if (nodes <= 1) return "glint launch -n " + n + " -- " + command;
    return "glint launch --nnodes " + std::to_string(nodes) + " --node-rank <node-rank> --master-addr " + addr +
           " -n " + n + " -- " + command;
  }
  if (launcher == "torchrun") {
    if (nodes <= 1) return "torchrun --no-python --nproc-per-node " + n + " " + command;
    return "torchrun --no-python --nnodes " + std::to_string(nodes) + " --node-rank <node-rank> --master-addr " +
           addr + " --nproc-per-node " + n + " " + command;
  }
  if (launcher == "openmpi") return "mpirun -n " + std::to_string(world) + " " + command;
  if (launcher == "slurm")
    return "MASTER_ADDR=" + addr + " srun --nodes " + std::to_string(nodes) + " --ntasks-per-node " + n + " " + command;
  return command;
}

std::chrono::milliseconds dist_timeout() {
  int s = env_int_or("GLINT_DIST_TIMEOUT_SECONDS", 1800, 1);
  return std::chrono::milliseconds(int64_t(s) * 1000);
}

std::chrono::milliseconds heartbeat_timeout() {
  int s = env_int_or("GLINT_HEARTBEAT_TIMEOUT_SECONDS", 60, 1);
  return std::min(std::chrono::milliseconds(int64_t(s) * 1000), dist_timeout());
}

}  // namespace glint
