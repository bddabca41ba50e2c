// An op-level profile of training steps: where the time of a step goes, by phase
// (forward, backward, optimizer, ...), by region of the model (attention, router, experts,
// head and loss, ...) and by ATen operator, with self times (a parent's time excludes its
// children's), so that the rows of a phase add up to the phase.
//
// Regions and phases are named by the code (profile::Scope); operators are seen through
// ATen's RecordFunction hooks, which cost nothing until a profile runs. A backward op is
// credited to the region whose forward created its autograd node (matched by the node's
// sequence number), so "experts" in the backward phase is the experts' backward.
//
// Only the thread that runs the step is profiled: work that an op hands to intra-op
// threads is inside that op's time. One profile runs at a time in a process.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace glint::profile {

namespace detail {
extern std::atomic<bool> g_active;
void push_scope(const char* name, bool phase);
void pop_scope();
}  // namespace detail

inline bool active() { return detail::g_active.load(std::memory_order_relaxed); }

// A named region of the step while it is alive: a phase ("forward", "backward",
// "optimizer": the outermost) or a region of the model ("attention", "experts": the
// innermost one names the ops). `name` must outlive the profile (a string literal).
class Scope {
 public:
  explicit Scope(const char* name, bool phase = false) : on_(active()) {
    if (on_) detail::push_scope(name, phase);
  }
  ~Scope() {
    if (on_) detail::pop_scope();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool on_;
};

// A phase: Scope(name, /*phase=*/true).
class Phase : public Scope {
 public:
  explicit Phase(const char* name) : Scope(name, true) {}
};

// Collects while started; report() summarises what was collected.
class Profiler {
 public:
  Profiler();
  ~Profiler();  // stops
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  void start();
  void stop();
  bool running() const { return running_; }
  // Steps profiled so far (the caller counts them: note_step after each).
  void note_step() { ++steps_; }
  int64_t steps() const { return steps_; }

  // {"steps", "phases": [{"phase", "seconds", "share", "regions": [{"region", "seconds",
  // "share"}], "ops": [{"op", "region", "calls", "seconds", "share"}] (the top `top_ops`
  // by self time)}]}; seconds are per step, shares of the phase.
  nlohmann::json report(int top_ops = 15) const;
  // The same as readable lines: each phase with its regions and top operators.
  std::string text(int top_ops = 10) const;

  struct Data;

 private:
  std::unique_ptr<Data> data_;
  bool running_ = false;
  int64_t steps_ = 0;
};

}  // namespace glint::profile
