// Graceful stop on SIGTERM / SIGINT: while a StopSignals lives, the first of them only
// records the request (polled by the training loop, which finishes its step and saves);
// a second one ends the process at once, with status 128 + signal, writing nothing.
#pragma once

namespace glint {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // puts the previous ones back
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The signal received (SIGTERM, SIGINT), or 0.
  static int received();
};

}  // namespace glint
