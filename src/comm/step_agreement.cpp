#include "topotrain/comm/step_agreement.h"

#include <algorithm>
#include <limits>

#include "topotrain/comm/watchdog.h"

namespace topotrain::comm {
namespace {

// The buffer of one agreement: [n, n sums, oom rank, non-finite rank, go, writer idle, oom
// peak], with "none" as +infinity among the ranks, stop as go = 0 and a writing writer as
// idle = 0, so that one reduction computes sums, minima and a maximum. Its layout travels in it (n), because MPI hands a user
// operation nothing but the buffers.
constexpr double kNone = std::numeric_limits<double>::infinity();
constexpr int kTail = 5;

void reduce_agreement(void* in, void* inout, int*, MPI_Datatype*) {
  const auto* a = static_cast<const double*>(in);
  auto* b = static_cast<double*>(inout);
  const int n = static_cast<int>(b[0]);
  for (int i = 1; i <= n; ++i) b[i] += a[i];
  for (int i = n + 1; i < n + 1 + kTail - 1; ++i) b[i] = std::min(a[i], b[i]);
  b[n + kTail] = std::max(a[n + kTail], b[n + kTail]);
}

MPI_Op agreement_op() {
  static MPI_Op op = [] {
    MPI_Op created = MPI_OP_NULL;
    MPI_Op_create(&reduce_agreement, /*commute=*/1, &created);
    return created;
  }();
  return op;
}

int rank_of(double value) { return value == kNone ? -1 : static_cast<int>(value); }

}  // namespace

StepAgreement agree_step(const StepAgreement& mine, MPI_Comm group) {
  const int n = static_cast<int>(mine.sums.size());
  std::vector<double> buffer(static_cast<std::size_t>(n + 1 + kTail));
  buffer[0] = n;
  std::copy(mine.sums.begin(), mine.sums.end(), buffer.begin() + 1);
  double* tail = buffer.data() + n + 1;
  tail[0] = mine.oom_rank >= 0 ? mine.oom_rank : kNone;
  tail[1] = mine.nonfinite_rank >= 0 ? mine.nonfinite_rank : kNone;
  tail[2] = mine.stop ? 0 : 1;
  tail[3] = mine.checkpoint_writing ? 0 : 1;
  tail[4] = mine.oom_rank >= 0 ? static_cast<double>(mine.oom_peak) : 0;
  all_reduce_in_place(buffer.data(), static_cast<int>(buffer.size()), MPI_DOUBLE, agreement_op(), group,
                      "MPI_Iallreduce (step agreement)");
  StepAgreement all;
  all.sums.assign(buffer.begin() + 1, buffer.begin() + 1 + n);
  all.oom_rank = rank_of(tail[0]);
  all.nonfinite_rank = rank_of(tail[1]);
  all.stop = tail[2] == 0;
  all.checkpoint_writing = tail[3] == 0;
  all.oom_peak = static_cast<std::int64_t>(tail[4]);
  return all;
}

}  // namespace topotrain::comm
