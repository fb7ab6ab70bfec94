// SIGUSR1, SIGINT and SIGTERM as a request for an orderly stop. The handler only sets a
// flag; the trainer polls it at step boundaries (and the "auto" token budget's probe between
// its candidates, before the first step) and agrees on it across ranks (the training
// session folds it into its per-step agreement, dflash's drafters into their step's go;
// Runtime::agree_stop is the stand-alone form) so that every rank stops after the same
// step, checkpoints, and exits 0. A second signal while the stop is pending ends the
// process at once.
//
// Under Open MPI's mpirun, SIGUSR1 is the one to use (`kill -USR1 <mpirun pid>`): mpirun
// forwards it to every rank. A Ctrl-C or SIGTERM to mpirun itself makes mpirun kill the
// job (SIGTERM, then SIGKILL about a second later), too soon for a checkpoint; the last
// periodic checkpoint stays valid because checkpoints are written under a temporary name.
//
// A rank killed outright (SIGKILL) tells no one; mpirun then sends the survivors SIGTERM.
// Once report_dead_peers_on_signal has the peer table, the handler first looks for a peer
// of this node that died (gone without its leaving mark: peer_processes.h), and the first
// rank of the node to find one prints "rank N (role) died or left; stopping" instead of
// the orderly-stop line; every rank that finds one then exits (code 1), as no collective
// can complete any more. A rank of a node whose ending flag is set (NodeMarks: the job is
// being ended on purpose, or the death was already reported) exits quietly. Every exit
// the handler makes on purpose is marked first, so that no peer names this rank as dead.
#pragma once

#include <string>
#include <vector>

#include "topotrain/core/peer_processes.h"

namespace topotrain {

void install_stop_handlers();
bool stop_requested();
void request_stop();  // what the handler does; also for tests
void clear_stop();
// From now on a stop signal ends the process at once, silently, with `exit_code`: for a
// rank that is leaving anyway (a configuration error), which mpirun signals as soon as
// the first rank has exited; the orderly-stop message would be untrue there.
void exit_on_stop_signal(int exit_code);
// Gives the handler every rank's process and the node's marks (Runtime::bind calls it; an
// empty table withdraws them); `prefix` starts the line it prints ("[rank 0 trainer]").
void report_dead_peers_on_signal(const std::vector<PeerProcess>& peers, int my_rank, const std::string& my_host,
                                 const std::string& prefix, const NodeMarks& marks);

}  // namespace topotrain
