// Every rank's process (world rank, role, host, pid), exchanged once when ranks are bound
// to roles, so that a rank can tell whether a peer on its own node still runs: a rank
// killed with SIGKILL says nothing, and mpirun takes the others down about a second later,
// too soon for any timeout. Peers on other nodes cannot be checked this way; for them
// process_state answers `unknown`.
//
// process_state and the table's reads are async-signal-safe (open/read/close of
// /proc/PID/stat, no allocation), so the stop-signal handler may use them: the SIGTERM
// that mpirun sends the survivors is the first moment some of them learn of a death.
#pragma once

#include <string>
#include <vector>

namespace topotrain {

struct PeerProcess {
  int rank = 0;
  std::string role;
  std::string host;
  int pid = 0;
  // "rank N (role)": how messages name a rank.
  std::string name() const;
};

enum class ProcessState {
  running,  // also sleeping or waiting: alive
  stopped,  // SIGSTOP or a debugger
  gone,     // exited, killed or a zombie
  unknown,  // on another node
};

// The state of `peer` as seen from `my_host`.
ProcessState process_state(const PeerProcess& peer, const std::string& my_host);
// Async-signal-safe: the state of a process of this node.
ProcessState local_process_state(int pid);

// "ranks 1 (trainer), 2 (trainer)", or "rank 1 (trainer)" for one; a stopped local
// process is marked "(process stopped)".
std::string describe_ranks(const std::vector<PeerProcess>& peers, const std::string& my_host);

// The lowest rank this node sees alive (peers on other nodes count as alive): it alone
// reports a dead peer, so that the job prints the news once per node.
int first_survivor(const std::vector<PeerProcess>& peers, const std::string& my_host);

}  // namespace topotrain
