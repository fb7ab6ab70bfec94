#include "topotrain/core/stop_signal.h"

#include <atomic>
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
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
  int local_rank;
  std::string name;  // "7 (drafter)"
};
struct DeathReport {
  std::vector<LocalPeer> peers;  // this node's other ranks, in rank order
  std::string prefix;            // "[rank 0 target]"
  NodeMarks marks;               // Runtime's node marks
  int my_local_rank = -1;
};
std::atomic<const DeathReport*> g_death_report{nullptr};

void write_text(const char* text, std::size_t length) {
  ssize_t ignored = write(STDERR_FILENO, text, length);
  (void)ignored;
}

// Appends `text` to the line being built in `line` (capacity `size`, `*used` so far), cut
// off where it is full: no allocation in a signal handler.
void append(char* line, std::size_t size, std::size_t* used, const char* text, std::size_t length) {
  const std::size_t n = std::min(length, size - *used);
  std::memcpy(line + *used, text, n);
  *used += n;
}
void append(char* line, std::size_t size, std::size_t* used, const std::string& text) {
  append(line, size, used, text.data(), text.size());
}

// Whether the job is ending: a rank of this node began ending it, or a peer of this node
// died (gone without its leaving mark: peer_processes.h), in which case no collective can
// complete. The first rank of the node to see the death names every peer that died, once
// for the node; peers that left on purpose (torn down after the death) are never named.
bool job_is_ending() {
  const DeathReport* report = g_death_report.load();
  if (!report) return false;
  if (report->marks.ending()) return true;
  char names[1024];
  std::size_t names_used = 0;
  int dead = 0;
  for (const LocalPeer& peer : report->peers) {
    if (!report->marks.died(peer.pid, peer.local_rank)) continue;
    if (dead++ > 0) append(names, sizeof names, &names_used, ", ", 2);
    append(names, sizeof names, &names_used, peer.name);
  }
  if (dead == 0) return false;
  if (report->marks.claim_ending()) {
    char line[2048];
    std::size_t used = 0;
    append(line, sizeof line, &used, report->prefix);
    append(line, sizeof line, &used, dead == 1 ? " rank " : " ranks ", dead == 1 ? 6 : 7);
    append(line, sizeof line, &used, names, names_used);
    const char tail[] = " died or left; stopping\n";
    append(line, sizeof line, &used, tail, sizeof tail - 1);
    write_text(line, used);
  }
  return true;
}

// Ends this process on purpose: marked first, so that no peer names it as dead.
[[noreturn]] void leave(int code) {
  if (const DeathReport* report = g_death_report.load()) report->marks.mark_leaving(report->my_local_rank);
  std::_Exit(code);
}

extern "C" void on_stop_signal(int signal) {
  if (g_exit_code >= 0) leave(g_exit_code);
  if (g_stop) std::_Exit(128 + signal);  // a second signal: killed, as asked
  g_stop = 1;
  // A peer dead means no collective can complete: there is no orderly stop to wait for.
  if (job_is_ending()) leave(1);
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
                                 const std::string& prefix, const NodeMarks& marks) {
  // Never freed: a handler may be reading the table published before this one.
  auto* report = new DeathReport;
  report->prefix = prefix;
  report->marks = marks;
  for (const PeerProcess& peer : peers) {
    if (peer.rank == my_rank) report->my_local_rank = peer.local_rank;
    if (peer.rank == my_rank || peer.host != my_host) continue;
    report->peers.push_back({peer.pid, peer.local_rank, cat(peer.rank, " (", peer.role, ")")});
  }
  g_death_report.store(peers.empty() ? nullptr : report);
}

}  // namespace topotrain
