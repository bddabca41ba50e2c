// Where this process stands in a multi-process job, read from the launcher's
// environment: torchrun or `glint launch` (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, GROUP_RANK; glint launch adds GLINT_LAUNCH=1), else OpenMPI (OMPI_COMM_WORLD_*), else Slurm (SLURM_PROCID,
// SLURM_NODEID, ...), else a single process.
//
// Ranks are numbered node by node (torchrun, glint launch, srun's block distribution,
// mpirun's by-slot mapping): node k holds ranks [k * local_world_size, (k + 1) *
// local_world_size).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <string>

namespace glint {

struct World {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node = 0;       // this rank's node: GROUP_RANK, SLURM_NODEID, else rank / local_world_size
  int num_nodes = 1;  // world_size / local_world_size
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher = "single";  // glint (glint launch), torchrun, openmpi, slurm or single

  bool distributed() const { return world_size > 1; }
  int node_of(int r) const { return r / local_world_size; }  // a rank's node
  // Throws glint::Error naming the variable for a malformed or inconsistent value.
  static World from_env();
  // What the job's launcher is and how many ranks it started where, as JSON
  // ({"launcher", "world_size", "nproc_per_node", "nnodes", "master_addr"}): recorded with
  // a run's checkpoints so that the command continuing the run can start the same job.
  nlohmann::json launch_json() const;
};

// The command line that starts `command` (e.g. "glint train --resume runs/x") as the job
// described by `launch_json` (World::launch_json) was started: "glint launch -n 2 -- ...",
// "torchrun --nproc-per-node 2 --no-python ...", "mpirun -n 4 ...", "srun ...", or the
// command alone for a single process. Several nodes: the line to run on each node, with
// <node-rank> to fill in where the launcher needs it. A description that is not an object
// (null: a checkpoint of an earlier version) gives the command alone.
std::string launch_command_line(const nlohmann::json& launch, const std::string& command);

// GLINT_DIST_TIMEOUT_SECONDS (default 1800): how long a collective or the rendezvous
// waits for the other ranks before failing.
std::chrono::milliseconds dist_timeout();
// GLINT_HEARTBEAT_TIMEOUT_SECONDS (default 60, at most the collective timeout): how long
// a rank's heartbeat may stand still before the job ends naming it (dist/liveness.h).
std::chrono::milliseconds heartbeat_timeout();

}  // namespace glint
