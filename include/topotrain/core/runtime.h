// The MPI runtime of one rank: init/finalize, the node-local rank, this rank's role and
// device from the topology, and a communicator per role group.
//
// Invariant: every collective here is entered by all ranks of the communicator in the
// same order. Errors are therefore never thrown between two collectives on some ranks
// only: a rank that fails either aborts the whole job (abort) or reports through
// first_error, which every rank enters.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "topotrain/core/peer_processes.h"
#include "topotrain/core/topology.h"

namespace topotrain {

class Runtime {
 public:
  Runtime(int* argc, char*** argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }  // among ranks on this node
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }

  // Collective over the world: takes this rank's role and device from the validated
  // topology, selects the CUDA device (unless select_device is false: a dry run, which
  // uses no device), splits one communicator per role and gathers every rank's process
  // (peers), which it also hands to the stop-signal handler.
  void bind(const Topology& topology, bool select_device = true);
  const std::string& role() const { return role_; }
  int role_rank() const { return role_rank_; }
  int role_size() const { return role_size_; }
  MPI_Comm role_comm() const { return role_comm_; }
  const Device& device() const { return device_; }
  // Every world rank's process, indexed by world rank.
  const std::vector<PeerProcess>& peers() const { return peers_; }

  // How one rank's part of a job ended: code 0, or an exit code and the message for the user.
  struct Outcome {
    int code = 0;
    std::string message;
  };
  // Collective over `comm` (every rank, or a role group): the outcome of its lowest rank whose
  // code is non-zero, on every rank of it, or code 0 when no rank failed. Lets every rank leave
  // together with one message.
  Outcome first_failure(const Outcome& mine, MPI_Comm comm = MPI_COMM_WORLD) const;
  // first_failure for bad input: the message of the lowest rank whose `local_error` is
  // non-empty, or "" when no rank has one.
  std::string first_error(const std::string& local_error, MPI_Comm comm = MPI_COMM_WORLD) const;

  // Collective: true on every rank when SIGINT/SIGTERM reached any rank.
  bool agree_stop() const;

  // Collective: "rank role device host" lines of all ranks, on rank 0 ("" elsewhere).
  std::string placement_table() const;

  // Prints "[rank N role] message" to stderr and takes every rank down (MPI_Abort). Marks
  // the node as ending and this rank as leaving first (NodeMarks). When a peer of this node
  // died and no rank of the node has yet said why the job ends, the line names the death
  // ("rank 7 (drafter) died or left; stopping (this rank: <message>)"): what this rank saw
  // (a link that broke, a collective that failed) follows from it.
  [[noreturn]] void abort(const std::string& message, int exit_code = 1) const;
  // When a peer of this node died (dead_peers) and no rank of the node has yet said why the
  // job ends: prints "rank N (role) died or left; stopping" and takes every rank down (exit
  // 1). Otherwise returns. For the waits that watch their peers (comm/watchdog.h).
  void abort_if_peer_died() const;

  // The node's ending flag (NodeMarks): set once a rank of the node ends the job, so that
  // the others, watching their peers vanish as mpirun takes the job down, do not report
  // those as deaths. claim_ending sets it and says whether this rank was the first.
  bool claim_ending() const;
  bool ending() const;
  // This node's peers that died: gone without having marked themselves as leaving, so
  // never a rank torn down after another's death. Peers on other nodes are not checked.
  std::vector<PeerProcess> dead_peers() const;

  // GPUs visible to this process (0 in CPU builds).
  static int gpus_present();

 private:
  void gather_peers(const Topology& topology);  // collective over the world
  [[noreturn]] void leave_with(const std::string& line, int exit_code) const;

  bool owns_mpi_ = true;
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string host_;
  std::string role_;
  int role_rank_ = 0;
  int role_size_ = 1;
  MPI_Comm role_comm_ = MPI_COMM_NULL;
  Device device_;
  std::vector<PeerProcess> peers_;
  MPI_Win node_window_ = MPI_WIN_NULL;
  NodeMarks node_marks_;  // in node_window_
};

}  // namespace topotrain
