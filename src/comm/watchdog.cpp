#include "topotrain/comm/watchdog.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "mpi_types.h"
#include "topotrain/core/error.h"

namespace topotrain::comm {
namespace {

using namespace std::chrono_literals;

constexpr int kPositionTag = 1;
constexpr auto kCheckEvery = 200ms;
constexpr auto kPollWithoutPause = 2ms;
constexpr auto kLongestPause = 2ms;

// The Watchdog of the thread that built it; waits on other threads only sleep.
std::atomic<Watchdog*> g_watchdog{nullptr};
std::atomic<std::thread::id> g_watchdog_thread{};

Watchdog* watchdog_of_this_thread() {
  Watchdog* watchdog = g_watchdog.load();
  return watchdog && g_watchdog_thread.load() == std::this_thread::get_id() ? watchdog : nullptr;
}

double seconds(Watchdog::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void wait_request(MPI_Request* request, const char* what) {
  Watchdog* watchdog = watchdog_of_this_thread();
  if (watchdog) watchdog->wait_begins();
  const auto since = Watchdog::Clock::now();
  auto last_check = since;
  auto pause = 50us;
  while (true) {
    int done = 0;
    detail::mpi_check(MPI_Test(request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
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
    if (watchdog && now - last_check >= kCheckEvery) {
      last_check = now;
      watchdog->check(since, now);
    }
  }
}

void all_reduce_in_place(void* data, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char* what) {
  MPI_Request request = MPI_REQUEST_NULL;
  detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, data, count, type, op, comm, &request), what);
  wait_request(&request, what);
}

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
  g_watchdog_thread.store(std::this_thread::get_id());
  g_watchdog.store(this);
}

Watchdog::~Watchdog() {
  g_watchdog.store(nullptr);
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
  check_deaths();
  if (timeout_s_ <= 0) return;
  const double waited = seconds(now - waiting_since);
  // One grace for a pipeline's feed waits (check_feed) to name a silent sender first, then
  // the monitor; the others step in, one after the other, only when the monitor is the one
  // behind (when it is not, it reports the hang itself).
  const double grace = (me_ + 1) * std::max(2.0, 0.25 * allowance_s_);
  if (waited <= allowance_s_ + grace) return;
  drain_reports();
  std::vector<int> behind;
  for (std::size_t i = 0; i < known_.size(); ++i) {
    const int group_rank = me_ == 0 ? static_cast<int>(i) : 0;
    if (group_rank != me_ && known_[i] < position_) behind.push_back(world_rank_[static_cast<std::size_t>(group_rank)]);
  }
  if (me_ != 0 && behind.empty()) return;
  end_job(waited, behind.empty() ? std::string("every rank of the group entered the collective, which did not complete")
                                 : cat(describe_ranks(peers_of(behind), runtime_.host()), " did not arrive"));
}

void Watchdog::check_feed(double waited, const std::vector<int>& silent) {
  check_deaths();
  if (timeout_s_ <= 0 || waited <= allowance_s_ || silent.empty()) return;
  end_job(waited, cat("nothing arrived from ", describe_ranks(peers_of(silent), runtime_.host())));
}

void Watchdog::check_deaths() { runtime_.abort_if_peer_died(); }

std::vector<PeerProcess> Watchdog::peers_of(const std::vector<int>& world_ranks) const {
  std::vector<PeerProcess> peers;
  for (int rank : world_ranks) peers.push_back(runtime_.peers()[static_cast<std::size_t>(rank)]);
  return peers;
}

void Watchdog::end_job(double waited, const std::string& why) const {
  if (!runtime_.claim_ending()) return;  // a rank of this node already said why the job ends
  runtime_.abort(cat("step ", position_.first, " made no progress for ", static_cast<int>(waited), " s (allowance ",
                     allowance_s_, " s; train.hang_timeout_s = ", timeout_s_, "): ", why, "; stopping every rank"),
                 kHangExitCode);
}

}  // namespace topotrain::comm
