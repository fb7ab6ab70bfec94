#include "topotrain/core/stop_signal.h"

#include <csignal>
#include <cstdlib>
#include <unistd.h>

namespace topotrain {
namespace {

volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_exit_code = -1;  // >= 0: exit_on_stop_signal

extern "C" void on_stop_signal(int signal) {
  if (g_exit_code >= 0) std::_Exit(g_exit_code);
  if (g_stop) std::_Exit(128 + signal);
  g_stop = 1;
  const char message[] = "topotrain: stop requested; finishing the step and checkpointing (signal again to kill)\n";
  // write(2) is async-signal-safe; stdio is not.
  ssize_t ignored = write(STDERR_FILENO, message, sizeof(message) - 1);
  (void)ignored;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

bool stop_requested() { return g_stop != 0; }
void request_stop() { g_stop = 1; }
void clear_stop() { g_stop = 0; }
void exit_on_stop_signal(int exit_code) { g_exit_code = exit_code; }

}  // namespace topotrain
