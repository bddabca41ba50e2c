// `glint launch`: starts N local ranks of a command with the torchrun environment,
// prefixes every output line with its rank, and stops the job when a rank fails.
#pragma once

#include <string>
#include <vector>

namespace glint {

struct LaunchOptions {
  int nproc = 1;                          // ranks to start on this machine
  std::string master_addr = "127.0.0.1";  // rendezvous address given to the ranks
  int master_port = 0;                    // 0: a free port chosen at start
  double grace_seconds = 5.0;             // SIGTERM -> SIGKILL delay when stopping ranks
  std::vector<std::string> command;       // program and arguments run by every rank
  void validate() const;                  // throws glint::Error naming the bad value
};

// Runs the job to completion. Returns 0 when every rank exits 0; otherwise stops the
// remaining ranks, prints which rank failed first and how, and returns non-zero
// (that rank's exit status, or 128 + signal). SIGTERM or SIGINT to the launcher is passed
// to every rank (glint train then saves a checkpoint and exits 0); a second one kills
// them all at once and returns 128 + signal.
int launch(const LaunchOptions& options);

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_tcp_port();

}  // namespace glint
