#include "core/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace glint {

namespace {

volatile sig_atomic_t g_received = 0;
struct sigaction g_previous_term, g_previous_int;

void on_stop(int sig) {
  if (g_received != 0) {  // the second: at once (only async-signal-safe calls here)
    const char msg[] = "\nglint: second stop signal, exiting at once without saving\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    ::_exit(128 + sig);
  }
  g_received = sig;
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // collectives and file writes go on; the loop polls
  ::sigaction(SIGTERM, &sa, &g_previous_term);
  ::sigaction(SIGINT, &sa, &g_previous_int);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  ::sigaction(SIGINT, &g_previous_int, nullptr);
}

int StopSignals::received() { return int(g_received); }

}  // namespace glint
