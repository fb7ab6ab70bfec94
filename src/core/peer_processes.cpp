#include "topotrain/core/peer_processes.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "topotrain/core/error.h"

namespace topotrain {

std::string PeerProcess::name() const { return cat("rank ", rank, " (", role, ")"); }

ProcessState local_process_state(int pid) {
  // "/proc/<pid>/stat" holds "pid (comm) S ...": the state is the first letter after the
  // last ')', since comm may itself contain parentheses.
  char path[32];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);  // snprintf of ints does not allocate
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ProcessState::gone;
  char buffer[512];
  const ssize_t n = read(fd, buffer, sizeof(buffer) - 1);
  close(fd);
  if (n <= 0) return ProcessState::gone;
  char state = '?';
  for (ssize_t i = n - 1; i >= 0; --i)
    if (buffer[i] == ')') {
      if (i + 2 < n) state = buffer[i + 2];
      break;
    }
  switch (state) {
    case 'Z':
    case 'X':
    case 'x':
      return ProcessState::gone;
    case 'T':
    case 't':
      return ProcessState::stopped;
    default:
      return ProcessState::running;
  }
}

ProcessState process_state(const PeerProcess& peer, const std::string& my_host) {
  return peer.host == my_host ? local_process_state(peer.pid) : ProcessState::unknown;
}

std::string describe_ranks(const std::vector<PeerProcess>& peers, const std::string& my_host) {
  std::string text = peers.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (i > 0) text += ", ";
    text += cat(peers[i].rank, " (", peers[i].role, ")");
    if (process_state(peers[i], my_host) == ProcessState::stopped) text += " (process stopped)";
  }
  return text;
}

bool NodeMarks::claim_ending() const { return bytes_ && __atomic_exchange_n(bytes_, 1, __ATOMIC_SEQ_CST) == 0; }

bool NodeMarks::ending() const { return bytes_ && __atomic_load_n(bytes_, __ATOMIC_SEQ_CST) != 0; }

void NodeMarks::mark_leaving(int local_rank) const {
  if (bytes_ && local_rank >= 0) __atomic_store_n(bytes_ + 1 + local_rank, 1, __ATOMIC_SEQ_CST);
}

bool NodeMarks::died(int pid, int local_rank) const {
  if (local_process_state(pid) != ProcessState::gone) return false;
  // Read only now: a rank marks itself before it exits, so once it is seen gone its mark is there.
  return !bytes_ || local_rank < 0 || __atomic_load_n(bytes_ + 1 + local_rank, __ATOMIC_SEQ_CST) == 0;
}

std::vector<PeerProcess> dead_peers(const std::vector<PeerProcess>& peers, int my_rank, const std::string& my_host,
                                    const NodeMarks& marks) {
  std::vector<PeerProcess> dead;
  for (const PeerProcess& peer : peers)
    if (peer.rank != my_rank && peer.host == my_host && marks.died(peer.pid, peer.local_rank)) dead.push_back(peer);
  return dead;
}

}  // namespace topotrain
