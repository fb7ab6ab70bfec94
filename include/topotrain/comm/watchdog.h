// Liveness of the host-side waits of a step: no busy-spinning, no endless hang, and a
// word when a peer died.
//
// wait_request is how topotrain waits for an MPI request (the trainers' per-step
// agreements, the CPU backend's Work::wait, a dflash target's sends to its drafter), and
// wait_for_message how it waits for a message to arrive: MPI_Test/MPI_Iprobe, without pause
// for the first 2 ms (ranks merely out of step: a collective's rounds move only inside MPI
// calls, so sleeping there would add to every step), then with a sleep that backs off from
// 50 us to 2 ms, so a rank waiting for a slow or stopped peer costs a few percent of a core,
// not a whole one (Open MPI's blocking collectives spin).
//
// Every rank that can wait on another is watched: a Watchdog or a PeerWatchdog, while it
// exists, watches those waits on the thread that built it (one per process at a time).
//
// A Watchdog watches the ranks of one group that agree with each other every step
// (moe_train's trainers, dflash_train's drafters):
// * Every 0.2 s of a wait it checks whether a peer process of this node died (gone
//   without having marked itself as leaving: peer_processes.h, so never a rank torn down
//   after another's death); the first rank to see it ends the job with "rank N (role) died
//   or left; stopping" (exit 1), unless a rank of the node already began ending the job
//   (Runtime::abort_if_peer_died). (mpirun's SIGTERM to the survivors is the other way the
//   news arrives: stop_signal.h.)
// * Every rank of the group calls begin_step(step, slow) with the same arguments at the
//   start of every step. The allowance of a step is train.hang_timeout_s, more for a slow
//   step (the first of a process: warm-up, NCCL set-up; one that snapshots a checkpoint,
//   and the step after it): step_allowance_s. Every rank knows the checkpoint cadence, so
//   they agree on it without talking.
// * The n-th watched wait of step s is "position (s, n)". On entering a wait, a rank tells
//   the group's rank 0 (the monitor) its position on a private duplicate communicator
//   (a 16-byte MPI_Isend), and the monitor tells every other rank its own. This is
//   sound because every rank enters the group's collectives in the same order (the
//   Backend's ordering contract), so equal positions are the same collective.
//   Invariant for callers: on the watchdog's thread, wait_request is used only for
//   operations every rank of the group makes in the same order; a rank-local wait (rank
//   0's own I/O) must not go through it, or the positions drift apart.
// * The monitor, once its wait has lasted longer than the allowance plus a grace, names
//   the ranks whose position is behind its own ("did not arrive"), with the step, and
//   ends every rank (MPI_Abort, exit kHangExitCode) after its line is written. When every
//   rank entered the collective, a rank of this node whose process is stopped is the one
//   named ("did not complete the collective"): positions cannot tell it apart from the
//   others. Group rank g > 0, once its wait has lasted the allowance plus g + 1 graces
//   (the monitor's turn first, then one rank at a time, so the job prints one message),
//   does the same naming the monitor if the monitor is behind or stopped: rank 0 itself
//   may be the stuck one. The group's last rank ends the job even when it can name no one
//   (a rank of another node stopped inside the collective), so no hang outlives its
//   allowance plus the group's graces.
// * A timeout of 0 turns the deadline off; the waits still sleep and watch for deaths.
//
// A PeerWatchdog watches a rank that belongs to no such group but waits on given peers
// (a dflash target on its drafter: for room in the drafter's queue, a payload's credit,
// its answer to a close, the start of the next stream): every wait of its thread that
// lasts longer than a slow step's allowance ends the job naming those peers ("did not
// answer"). The slow allowance, because the peer's waits are its own and this rank cannot
// tell which of the peer's steps is slow: a drafter in its first step or at a checkpoint
// takes nothing from its targets for that long, legitimately.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "topotrain/core/runtime.h"

namespace topotrain::comm {

constexpr int kHangExitCode = 5;
// A slow step's allowance: kSlowStepFactor times train.hang_timeout_s, and at least
// kSlowStepMinimumExtraS more than it. Twice, because the one-off work of those steps is
// bounded: warm-up takes seconds to a few minutes, and a checkpoint step only copies the
// state into host memory reserved at the start (the write runs in the background); torch's
// NCCL watchdog gives every collective, its first included, the same 10 minutes. The minute
// keeps the small timeouts of tests and CPU runs clear of a loaded machine's first step.
constexpr double kSlowStepFactor = 2;
constexpr double kSlowStepMinimumExtraS = 60;

// The allowance of a step for train.hang_timeout_s = `timeout_s` (0: none).
double step_allowance_s(double timeout_s, bool slow);

// Waits for `request` as described above; `what` names the operation in MPI errors.
void wait_request(MPI_Request* request, const char* what);
// Waits, as wait_request does, until a message from `source` with `tag` can be received on
// `comm` (MPI_Probe, watched); its envelope goes to `status`.
void wait_for_message(int source, int tag, MPI_Comm comm, MPI_Status* status, const char* what);
// MPI_Allreduce in place over `comm` through wait_request.
void all_reduce_in_place(void* data, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char* what);

// Whether `step` writes a checkpoint at cadence `checkpoint_every` (checkpoint.every_steps)
// or follows one: a slow step for begin_step.
bool near_checkpoint(std::int64_t step, std::int64_t checkpoint_every);

// What the waits of one thread report to: its Watchdog or PeerWatchdog. Registers itself
// on construction for the constructing thread (one per process at a time).
class WaitWatcher {
 public:
  using Clock = std::chrono::steady_clock;
  WaitWatcher();
  virtual ~WaitWatcher();
  WaitWatcher(const WaitWatcher&) = delete;
  WaitWatcher& operator=(const WaitWatcher&) = delete;

  // A wait begins, and is still going at `now` (abort on a hang, or a death).
  virtual void wait_begins() {}
  virtual void check(Clock::time_point waiting_since, Clock::time_point now) = 0;
};

class Watchdog final : public WaitWatcher {
 public:
  // Collective over `group` (a role communicator of `runtime`). `timeout_s` is
  // train.hang_timeout_s.
  Watchdog(const Runtime& runtime, MPI_Comm group, double timeout_s);
  ~Watchdog() override;

  // Same arguments on every rank of the group (see the top of this file).
  void begin_step(std::int64_t step, bool slow);

  void wait_begins() override;
  void check(Clock::time_point waiting_since, Clock::time_point now) override;
  // A wait for data from the world ranks `silent` (dflash_train's drafter waiting for
  // hidden states: HiddenStateReceiver::set_wait_check) has lasted `waited` seconds: past
  // the allowance, the job ends naming them. The group's collective waits allow one grace
  // more, so that the silent sender, the cause, is named rather than its waiting receiver.
  void check_feed(double waited, const std::vector<int>& silent);

 private:
  using Position = std::pair<std::int64_t, std::int64_t>;  // (step, wait in the step)
  void tell(int group_rank);
  void drain_reports();
  void end_job(double waited, const std::string& why) const;

  const Runtime& runtime_;
  MPI_Comm reports_ = MPI_COMM_NULL;
  int me_ = 0;
  std::vector<int> world_rank_;  // of each group rank
  double timeout_s_;
  double allowance_s_ = 0;
  Position position_{0, 0};
  std::vector<Position> known_;  // the monitor: every rank's; the others: the monitor's (index 0)
  std::deque<std::pair<std::vector<std::int64_t>, MPI_Request>> sends_;  // in flight
};

class PeerWatchdog final : public WaitWatcher {
 public:
  // `peers`: the world ranks this rank's waits wait on. `timeout_s` is train.hang_timeout_s.
  PeerWatchdog(const Runtime& runtime, std::vector<int> peers, double timeout_s);

  void check(Clock::time_point waiting_since, Clock::time_point now) override;

 private:
  const Runtime& runtime_;
  std::vector<int> peers_;
  double timeout_s_;
  double allowance_s_;
};

}  // namespace topotrain::comm
