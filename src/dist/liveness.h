// Liveness of a distributed job's ranks, so that a failed or timed-out collective can
// say which rank (and node) was lost instead of only "another rank may have exited".
//
// Every rank runs a heartbeat: a thread that adds 1 to the key "liveness/<rank>" of the
// job's store (the TCPStore rank 0 hosts) once a second, over a connection of its own.
// A rank that exited, was stopped (SIGSTOP), or sits behind a cut link stops beating;
// a rank that computes, reads files or waits in a collective goes on beating.
//
// The heartbeat is also a watchdog, so that a lost node ends the job in about a minute
// rather than at the collective timeout (GLINT_DIST_TIMEOUT_SECONDS, 30 minutes by
// default): rank 0 watches every rank's counter, and one that stood still for the
// heartbeat limit (GLINT_HEARTBEAT_TIMEOUT_SECONDS, 60) without having left
// the job ends it: rank 0 posts the reason under "liveness/lost", every rank that reads
// it there exits with it, and so does rank 0. A rank whose store has not answered for the
// limit (its node lost the network, or rank 0's node died) exits naming the store's
// host. A rank that exits, normally or not, leaves the job (its Liveness is destroyed,
// or its connections close, which fails its peers' collectives at once).
#pragma once

#include <memory>
#include <string>

#include "dist/world.h"

namespace glint {

class Liveness {
 public:
  // Starts this rank's heartbeat. REQUIRES: world.distributed(), and rank 0's store is
  // up (the rendezvous is done).
  explicit Liveness(const World& world);
  // Stops the heartbeat and marks this rank as having left the job; waits for a store
  // that no longer answers at most its timeout (5 s).
  ~Liveness();
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // Watches every rank's counter for three heartbeats (~3 s) and names those that did
  // not move, with their nodes: "rank 2 and rank 3 (node 1) stopped answering ...".
  // When the store itself does not answer, names its host (rank 0, node 0). Returns ""
  // when every rank beats. Safe to call from any thread; never throws.
  std::string lost_ranks() const;

  struct State;  // shared with the heartbeat thread, which may outlive this object

 private:
  std::shared_ptr<State> state_;
};

// The job's liveness for this process, owned by the world Comm (Comm::create makes it
// for a distributed world and registers it here, unowned), and its answer to
// lost_ranks(); "" when there is none.
void set_job_liveness(std::shared_ptr<Liveness> liveness);
std::string job_lost_ranks();

// "rank R (node K)" for this process in its job, or "rank R" for a single node.
std::string describe_rank(const World& world, int rank);

}  // namespace glint
