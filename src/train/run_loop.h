// The run loop of a training job: it takes the job's steps one after another and around
// them writes the readable lines, metrics.jsonl (and each tenant's), the report page,
// evaluates on the schedule, saves checkpoints, and stops cleanly on SIGTERM / SIGINT
// (every rank finishes the step, a checkpoint is saved, and run() returns with stopped()
// true; a second signal exits the process at once). The maths of a step is the job's
// (Trainer::step, the step engine); the loop decides only when things happen.
#pragma once

namespace glint {

class Trainer;

class RunLoop {
 public:
  explicit RunLoop(Trainer& job);
  // Collective: every rank runs it. Only rank 0 writes files and lines.
  void run();
  // Whether run() ended early on a signal or --stop-after (its checkpoint: the job's
  // last_checkpoint()).
  bool stopped() const { return stopped_; }

 private:
  Trainer& job_;
  bool stopped_ = false;
};

}  // namespace glint
