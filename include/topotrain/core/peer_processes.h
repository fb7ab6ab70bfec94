// Every rank's process (world rank, role, host, pid), exchanged once when ranks are bound
// to roles, so that a rank can tell whether a peer on its own node still runs: a rank
// killed with SIGKILL says nothing, and mpirun takes the others down about a second later,
// too soon for any timeout. Peers on other nodes cannot be checked this way; for them
// process_state answers `unknown`.
//
// process_state and the table's reads are async-signal-safe (open/read/close of
// /proc/PID/stat, no allocation), so the stop-signal handler may use them: the SIGTERM
// that mpirun sends the survivors is the first moment some of them learn of a death.
//
// A process that is gone did not necessarily die: once one rank dies, the others leave
// too (mpirun's SIGTERM, an abort, a link that broke), and a rank that looks later sees
// them gone as well. NodeMarks tells the two apart: every rank marks itself before it
// leaves on purpose, so a peer gone without its mark is one that died (killed, crashed,
// taken by the OOM killer). Only such a peer is ever named as dead.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace topotrain {

struct PeerProcess {
  int rank = 0;
  std::string role;
  std::string host;
  int pid = 0;
  int local_rank = -1;  // among its node's ranks: where its NodeMarks mark is
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

// What the ranks of one node tell each other through memory they share (Runtime's node
// window, bytes(local_size) bytes, zeroed before any rank uses it): byte 0 is set once a
// rank of the node ends the job on purpose, so that the others, watching their peers
// vanish as mpirun takes the job down, report nothing; byte 1 + local rank is set by
// that rank before it leaves on purpose (any exit but a death). Plain bytes with atomic
// loads and stores: async-signal-safe, and never stale across processes.
class NodeMarks {
 public:
  NodeMarks() = default;  // no shared memory: every gone process counts as dead
  explicit NodeMarks(char* bytes) : bytes_(bytes) {}
  static std::size_t bytes(int local_size) { return 1 + static_cast<std::size_t>(local_size); }

  // Sets the ending flag; true for the rank that set it first.
  bool claim_ending() const;
  bool ending() const;
  void mark_leaving(int local_rank) const;
  // Whether the process `pid` of this node, local rank `local_rank`, died: it is gone and
  // left without its mark. The mark is read after the process is seen gone, and a rank
  // marks itself before it exits, so a rank that left on purpose is never taken for dead.
  bool died(int pid, int local_rank) const;

 private:
  char* bytes_ = nullptr;
};

// The peers of `peers` on `my_host`, other than `my_rank`, that died (NodeMarks::died):
// the deaths this rank can vouch for. Peers on other nodes are never named.
std::vector<PeerProcess> dead_peers(const std::vector<PeerProcess>& peers, int my_rank, const std::string& my_host,
                                    const NodeMarks& marks);

}  // namespace topotrain
