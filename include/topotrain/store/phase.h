// The named phases a training step is split into. The order is the column order of the
// timing log (timings.h5) and of the report; appending a phase is compatible with old
// logs because readers look columns up by name.
//
// What a phase's seconds are depends on where its work runs (PhaseTimer):
// * host phases (data_wait, queue_wait, send, recv, checkpoint; every phase in a CPU build)
//   are host time in exclusive CPU scopes: they never add up to more than the step's wall.
// * device phases on CUDA (h2d, forward, backward, comm_wait, optimizer, eval) are the device
//   time of the work on the stream it runs on, read from CUDA events a step later:
//     forward, backward, optimizer, the compute stream, from the first kernel enqueued in
//     eval                          the phase to the last one's end (device idle inside
//                                   the phase included: a launch-bound phase shows here);
//     comm_wait                     the gradient all-reduce on the NCCL stream, bucket by
//                                   bucket from its inputs being ready to its end (waiting
//                                   for slower ranks included); it runs under backward, and
//                                   StepRecord::comm_overlap_seconds says how much did;
//     h2d                           the prefetcher's copies of this step's batches on the
//                                   copy stream, done while the step before computed
//                                   (moe_train); a drafter's copies of the hidden states it
//                                   received, on the compute stream (dflash_train).
//   Device phases of different streams may overlap: StepRecord::overlap_seconds is the time
//   counted twice, and `other` (wall minus what the phases cover) stays the untimed rest.
// * checkpoint on CUDA is both: the host's stall for a snapshot (a save's step), and on the
//   compute stream the device's wait, before the next update, for that snapshot's copy to
//   host memory (the step after a save; at grad_accum 1 the copy can outlast a step's forward
//   and backward). The optimizer phase is the update's work alone.
// In a CPU build comm_wait is the host's wait for the all-reduce and for the step's
// agreement (train/training_session.h), and h2d the host's batch conversion.
#pragma once

#include <array>
#include <cstddef>
#include <string>

namespace topotrain {

enum class Phase : unsigned char {
  data_wait,   // waiting for the prefetcher's next batch
  h2d,         // host-to-device copies of the step's batches
  forward,
  backward,
  comm_wait,   // the gradient all-reduce: host wait (CPU), its device time (CUDA)
  optimizer,
  queue_wait,  // waiting on a hidden-state queue (drafter: empty; target: full)
  send,
  recv,
  checkpoint,  // snapshot for the checkpoint writer (the write itself is on a thread)
  eval,        // the held-out loss (train.eval_every), on the steps that evaluate
};

constexpr std::size_t kPhaseCount = 11;

// Column names: "data_wait", "h2d", ...
const std::array<const char*, kPhaseCount>& phase_names();
inline const char* phase_name(Phase phase) { return phase_names()[static_cast<std::size_t>(phase)]; }

// Phases whose time is spent waiting for another rank or stage; the report separates
// them from work when it names a bottleneck.
bool is_wait_phase(Phase phase);
// Phases that move data between ranks (the report's comm fraction).
bool is_comm_phase(Phase phase);

}  // namespace topotrain
