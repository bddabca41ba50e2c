// Liveness of a distributed job's ranks, so that a failed or timed-out collective can
// say which rank (and node) was lost instead of only "another rank may have exited".
//
// Every rank runs a heartbeat: a thread that adds 1 to the key "liveness/<rank>" of the
// job's store (the TCPStore rank 0 hosts) once a second, over a connection of its own.
// A rank that exited, was stopped (SIGSTOP), or sits behind a cut link stops beating;
// a rank that computes, reads files or waits in a collective goes on beating.
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
  // Stops the heartbeat; does not wait for a store that no longer answers.
  ~Liveness();
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // Watches every rank's counter for three heartbeats (~3 s) and names those that did
  // not move, with their nodes: "rank 2 and rank 3 (node 1) stopped answering ...".
  // When the store itself does not answer, names its host (rank 0, node 0). Returns ""
  // when every rank beats. Safe to call from any thread; never throws.
  std::string lost_ranks() const;

 private:
  struct State;
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
