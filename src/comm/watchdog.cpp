#include "topotrain/comm/watchdog.h"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <thread>

#include "mpi_types.h"
#include "topotrain/core/error.h"
#include "topotrain/core/fault_injection.h"

namespace topotrain::comm {
namespace {

using namespace std::chrono_literals;

constexpr int kPositionTag = 1;
constexpr auto kCheckEvery = 200ms;
constexpr auto kPollWithoutPause = 2ms;
constexpr auto kLongestPause = 2ms;

// The WaitWatcher of the thread that built it; waits on other threads only sleep.
std::atomic<WaitWatcher*> g_watcher{nullptr};
std::atomic<std::thread::id> g_watcher_thread{};

WaitWatcher* watcher_of_this_thread() {
  WaitWatcher* watcher = g_watcher.load();
  return watcher && g_watcher_thread.load() == std::this_thread::get_id() ? watcher : nullptr;
}

double seconds(Watchdog::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Polls `done` until it says the operation completed (see the top of watchdog.h).
template <typename Done>
void wait_until(Done done) {
  WaitWatcher* watcher = watcher_of_this_thread();
  if (watcher) watcher->wait_begins();
  const auto since = Watchdog::Clock::now();
  auto last_check = since;
  auto pause = 50us;
  while (!done()) {
    // A collective moves on only inside MPI calls, and each of its rounds waits for this
    // rank's next one: polled without pause while the ranks are merely out of step, so
    // that an agreement costs no sleep; after that, sleeps that back off.
    if (Watchdog::Clock::now() - since < kPollWithoutPause) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, kLongestPause);
    const auto now = Watchdog::Clock::now();
    if (watcher && now - last_check >= kCheckEvery) {
      last_check = now;
      watcher->check(since, now);
    }
  }
}

std::vector<PeerProcess> peers_of(const Runtime& runtime, const std::vector<int>& world_ranks) {
  std::vector<PeerProcess> peers;
  for (int rank : world_ranks) peers.push_back(runtime.peers()[static_cast<std::size_t>(rank)]);
  return peers;
}

// Ends every rank with `message` and the hang exit code, unless another rank of this node
// already is ending the job (then returns: that rank's message stands and mpirun takes this one).
void end_hung_job(const Runtime& runtime, const std::string& message) {
  if (!runtime.claim_ending()) return;
  runtime.abort(message, kHangExitCode);
}

}  // namespace

void wait_request(MPI_Request* request, const char* what) {
  wait_until([&] {
    int done = 0;
    detail::mpi_check(MPI_Test(request, &done, MPI_STATUS_IGNORE), what);
    return done != 0;
  });
}

void wait_for_message(int source, int tag, MPI_Comm comm, MPI_Status* status, const char* what) {
  wait_until([&] {
    int arrived = 0;
    detail::mpi_check(MPI_Iprobe(source, tag, comm, &arrived, status), what);
    return arrived != 0;
  });
}

void all_reduce_in_place(void* data, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char* what) {
  MPI_Request request = MPI_REQUEST_NULL;
  detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, data, count, type, op, comm, &request), what);
  wait_request(&request, what);
}

WaitWatcher::WaitWatcher() {
  g_watcher_thread.store(std::this_thread::get_id());
  g_watcher.store(this);
}

WaitWatcher::~WaitWatcher() { g_watcher.store(nullptr); }

bool near_checkpoint(std::int64_t step, std::int64_t checkpoint_every) {
  return checkpoint_every > 0 && (step % checkpoint_every == 0 || (step - 1) % checkpoint_every == 0);
}

Watchdog::Watchdog(const Runtime& runtime, MPI_Comm group, double timeout_s)
    : runtime_(runtime), timeout_s_(timeout_s) {
  detail::mpi_check(MPI_Comm_dup(group, &reports_), "MPI_Comm_dup (watchdog)");
  int size = 0;
  MPI_Comm_rank(reports_, &me_);
  MPI_Comm_size(reports_, &size);
  world_rank_.resize(static_cast<std::size_t>(size));
  const int mine = runtime.rank();
  detail::mpi_check(MPI_Allgather(&mine, 1, MPI_INT, world_rank_.data(), 1, MPI_INT, reports_),
                    "MPI_Allgather (watchdog)");
  known_.assign(me_ == 0 ? world_rank_.size() : 1, Position{0, 0});
}

Watchdog::~Watchdog() {
  if (!detail::mpi_alive()) return;
  // Reports still in flight are of no use to anyone now; MPI completes them on its own.
  for (auto& [buffer, request] : sends_) MPI_Request_free(&request);
  MPI_Comm_free(&reports_);
}

double step_allowance_s(double timeout_s, bool slow) {
  if (!slow || timeout_s <= 0) return timeout_s;
  return std::max(kSlowStepFactor * timeout_s, timeout_s + kSlowStepMinimumExtraS);
}

void Watchdog::begin_step(std::int64_t step, bool slow) {
  position_ = {step, 0};
  allowance_s_ = step_allowance_s(timeout_s_, slow);
}

void Watchdog::wait_begins() {
  ++position_.second;
  while (!sends_.empty()) {
    int done = 0;
    MPI_Test(&sends_.front().second, &done, MPI_STATUS_IGNORE);
    if (!done) break;
    sends_.pop_front();
  }
  if (me_ == 0) {
    for (int g = 1; g < static_cast<int>(world_rank_.size()); ++g) tell(g);
  } else {
    tell(0);
  }
  drain_reports();
  if (fault_injected("TOPOTRAIN_FAULT_STALL_IN_COLLECTIVE", runtime_.rank(), position_.first)) {
    for (auto& [buffer, request] : sends_) MPI_Wait(&request, MPI_STATUS_IGNORE);  // the group knows it entered
    sends_.clear();
    std::raise(SIGSTOP);
  }
}

void Watchdog::tell(int group_rank) {
  sends_.emplace_back(std::vector<std::int64_t>{position_.first, position_.second}, MPI_REQUEST_NULL);
  auto& [buffer, request] = sends_.back();
  detail::mpi_check(MPI_Isend(buffer.data(), 2, MPI_INT64_T, group_rank, kPositionTag, reports_, &request),
                    "MPI_Isend (watchdog)");
}

void Watchdog::drain_reports() {
  while (true) {
    int waiting = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kPositionTag, reports_, &waiting, &status);
    if (!waiting) return;
    std::int64_t position[2];
    MPI_Recv(position, 2, MPI_INT64_T, status.MPI_SOURCE, kPositionTag, reports_, MPI_STATUS_IGNORE);
    Position& known = known_[me_ == 0 ? static_cast<std::size_t>(status.MPI_SOURCE) : 0];
    known = std::max(known, Position{position[0], position[1]});
  }
}

void Watchdog::check(Clock::time_point waiting_since, Clock::time_point now) {
  runtime_.abort_if_peer_died();
  if (timeout_s_ <= 0) return;
  const double waited = seconds(now - waiting_since);
  // One grace for a pipeline's feed waits (check_feed) to name a silent sender first, then
  // the monitor; the others step in, one after the other, only when the monitor cannot
  // (when it can, it reports the hang itself).
  const double grace = (me_ + 1) * std::max(2.0, 0.25 * allowance_s_);
  if (waited <= allowance_s_ + grace) return;
  drain_reports();
  std::vector<int> behind, stopped;
  for (std::size_t i = 0; i < known_.size(); ++i) {
    const int group_rank = me_ == 0 ? static_cast<int>(i) : 0;
    if (group_rank != me_ && known_[i] < position_) behind.push_back(world_rank_[static_cast<std::size_t>(group_rank)]);
  }
  if (!behind.empty()) {
    end_job(waited, cat(describe_ranks(peers_of(runtime_, behind), runtime_.host()), " did not arrive"));
    return;
  }
  // Every rank (the monitor: as far as a non-monitor knows) entered the collective. One
  // stopped inside it is found by its process state, on this node only.
  for (std::size_t g = 0; g < world_rank_.size(); ++g) {
    const PeerProcess& peer = runtime_.peers()[static_cast<std::size_t>(world_rank_[g])];
    if (static_cast<int>(g) != me_ && process_state(peer, runtime_.host()) == ProcessState::stopped)
      stopped.push_back(peer.rank);
  }
  if (!stopped.empty()) {
    end_job(waited, cat(describe_ranks(peers_of(runtime_, stopped), runtime_.host()), " did not complete the collective"));
    return;
  }
  if (me_ != 0 && me_ + 1 != static_cast<int>(world_rank_.size())) return;
  bool other_nodes = false;
  for (int rank : world_rank_) other_nodes |= runtime_.peers()[static_cast<std::size_t>(rank)].host != runtime_.host();
  end_job(waited, cat("every rank of the group entered the collective, which did not complete",
                      other_nodes ? " (a rank of another node may be stopped inside it)" : ""));
}

void Watchdog::check_feed(double waited, const std::vector<int>& silent) {
  runtime_.abort_if_peer_died();
  if (timeout_s_ <= 0 || waited <= allowance_s_ || silent.empty()) return;
  end_job(waited, cat("nothing arrived from ", describe_ranks(peers_of(runtime_, silent), runtime_.host())));
}

void Watchdog::end_job(double waited, const std::string& why) const {
  end_hung_job(runtime_, cat("step ", position_.first, " made no progress for ", static_cast<int>(waited),
                             " s (allowance ", allowance_s_, " s; train.hang_timeout_s = ", timeout_s_, "): ", why,
                             "; stopping every rank"));
}

PeerWatchdog::PeerWatchdog(const Runtime& runtime, std::vector<int> peers, double timeout_s)
    : runtime_(runtime),
      peers_(std::move(peers)),
      timeout_s_(timeout_s),
      allowance_s_(step_allowance_s(timeout_s, /*slow=*/true)) {}

void PeerWatchdog::check(Clock::time_point waiting_since, Clock::time_point now) {
  runtime_.abort_if_peer_died();
  const double waited = seconds(now - waiting_since);
  if (timeout_s_ <= 0 || waited <= allowance_s_) return;
  end_hung_job(runtime_, cat("made no progress for ", static_cast<int>(waited), " s (allowance ", allowance_s_,
                             " s, a slow step's; train.hang_timeout_s = ", timeout_s_, "): ",
                             describe_ranks(peers_of(runtime_, peers_), runtime_.host()),
                             " did not answer; stopping every rank"));
}

}  // namespace topotrain::comm
