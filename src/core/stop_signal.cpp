#include "topotrain/core/stop_signal.h"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <unistd.h>

#include "topotrain/core/error.h"

namespace topotrain {
namespace {

volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_exit_code = -1;  // >= 0: exit_on_stop_signal

// What the handler needs about this node's other ranks, built before it is published and
// never changed after: the handler only reads it.
struct LocalPeer {
  int pid;
  std::string line;  // "<prefix> rank N (role) died or left; stopping\n"
};
struct DeathReport {
  std::vector<LocalPeer> lower;   // this node's ranks below this one, in rank order
  std::vector<LocalPeer> others;  // and the rest
  char* node_ending = nullptr;    // Runtime's shared flag
};
std::atomic<const DeathReport*> g_death_report{nullptr};

void write_text(const std::string& text) {
  ssize_t ignored = write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

// Whether a peer of this node is gone or the node is ending the job; a death is reported
// by this rank when every lower rank of the node is gone too and no rank of the node has
// begun ending the job (one line per node).
bool job_is_ending() {
  const DeathReport* report = g_death_report.load();
  if (!report || !report->node_ending) return false;
  if (__atomic_load_n(report->node_ending, __ATOMIC_SEQ_CST) != 0) return true;
  const LocalPeer* dead = nullptr;
  bool lower_alive = false;
  for (const LocalPeer& peer : report->lower) {
    if (local_process_state(peer.pid) == ProcessState::gone) {
      if (!dead) dead = &peer;
    } else {
      lower_alive = true;
    }
  }
  for (const LocalPeer& peer : report->others)
    if (!dead && local_process_state(peer.pid) == ProcessState::gone) dead = &peer;
  if (!dead) return false;
  if (!lower_alive && __atomic_exchange_n(report->node_ending, 1, __ATOMIC_SEQ_CST) == 0) write_text(dead->line);
  return true;
}

extern "C" void on_stop_signal(int signal) {
  if (g_exit_code >= 0) std::_Exit(g_exit_code);
  if (g_stop) std::_Exit(128 + signal);
  g_stop = 1;
  // A peer gone means no collective can complete: there is no orderly stop to wait for.
  if (job_is_ending()) std::_Exit(1);
  // True wherever the flag is polled: at a step's end (then a checkpoint follows) and between
  // the candidates of train.token_budget = "auto" (before the first step: none to write).
  const char message[] =
      "topotrain: stop requested; finishing the step in flight and checkpointing (before the first step: stopping "
      "without a checkpoint); signal again to kill\n";
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

void report_dead_peers_on_signal(const std::vector<PeerProcess>& peers, int my_rank, const std::string& my_host,
                                 const std::string& prefix, char* node_ending) {
  // Never freed: a handler may be reading the table published before this one.
  auto* report = new DeathReport;
  report->node_ending = node_ending;
  for (const PeerProcess& peer : peers) {
    if (peer.rank == my_rank || peer.host != my_host) continue;
    LocalPeer local{peer.pid, cat(prefix, ' ', peer.name(), " died or left; stopping\n")};
    (peer.rank < my_rank ? report->lower : report->others).push_back(std::move(local));
  }
  g_death_report.store(report);
}

}  // namespace topotrain
