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

int first_survivor(const std::vector<PeerProcess>& peers, const std::string& my_host) {
  for (const PeerProcess& peer : peers)
    if (process_state(peer, my_host) != ProcessState::gone) return peer.rank;
  return -1;
}

}  // namespace topotrain
