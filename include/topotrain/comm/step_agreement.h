// The agreement every rank of a training group reaches once per step, in one collective:
// the step's sums (its loss terms, weights, tokens: whatever the job adds up), the lowest
// rank that ran out of memory and the largest peak allocation among those that did, the
// lowest rank whose sums are not finite, whether any rank was asked to stop, and whether
// the group's checkpoint writer is still writing (so that every rank defers alike a
// checkpoint that falls due meanwhile).
//
// A job decides what to do with the step from this alone, so every rank decides alike:
// all apply the step, all skip it, all retry it, or all end. The collective goes through
// comm::all_reduce_in_place, so a rank that never arrives is named by the watchdog.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

namespace topotrain::comm {

struct StepAgreement {
  std::vector<double> sums;    // summed over the group; the same length on every rank
  int oom_rank = -1;           // -1: no rank ran out of memory
  std::int64_t oom_peak = 0;   // bytes; the largest among the ranks that ran out of memory
  int nonfinite_rank = -1;     // -1: every rank's sums are finite
  bool stop = false;
  bool checkpoint_writing = false;

  bool out_of_memory() const { return oom_rank >= 0; }
};

// Collective over `group`; every rank passes as many sums. `mine` holds this rank's sums and, as oom_rank and
// nonfinite_rank, its own rank where that applies (the caller's numbering, e.g. the world
// rank, is what comes back). Ranks and byte counts travel as doubles: exact below 2^53.
StepAgreement agree_step(const StepAgreement& mine, MPI_Comm group);

}  // namespace topotrain::comm
