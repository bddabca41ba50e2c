// `glint launch`: starts this node's ranks of a command with the torchrun environment,
// prefixes every output line with its rank, and stops the node's ranks when one fails.
//
// Several nodes: the same command on each, with --nnodes N --node-rank K and rank 0's
// node as --master-addr. Ranks are numbered node by node (node K runs ranks
// [K * nproc, (K + 1) * nproc)), as torchrun does. The nodes do not talk to each other;
// a rank whose peer on another node is lost fails in its next collective, naming the
// lost ranks (dist/liveness.h), and its launcher then stops the rest of its node.
#pragma once

#include <string>
#include <vector>

namespace glint {

struct LaunchOptions {
  int nproc = 1;                          // ranks to start on this machine
  int nnodes = 1;                         // machines in the job, each running nproc ranks
  int node_rank = 0;                      // this machine's index in [0, nnodes)
  std::string master_addr = "127.0.0.1";  // rendezvous address given to the ranks (node 0's)
  int master_port = 0;                    // 0: a free port (one node), 29500 (several)
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

// A free TCP port on 127.0.0.1, held until this object goes: its socket stays bound
// (with SO_REUSEADDR, not listening), so the kernel hands the port to no other bind(0)
// or outgoing connection, while the rendezvous store, which binds with SO_REUSEADDR
// too, can still listen on it. Releasing the port between choosing and binding it let
// another job's connections take it.
class ReservedPort {
 public:
  ReservedPort();
  ~ReservedPort();
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
};

}  // namespace glint
