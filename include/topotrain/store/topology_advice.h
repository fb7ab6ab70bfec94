// Which split of a DFlash run's ranks between targets and drafters would be fastest, and
// for a moe_train run whether more gradient accumulation would pay: a throughput model fed
// by the run's stitched timings (run_stitch.h), printed by topotrain-report. The model and
// its limits are written down in docs/dflash.md ("Choosing the split").
//
// DFlash is a two-stage pipeline, so its throughput is that of its slower stage:
//
//   throughput(T', D') = min(T' * r_t,  D' * b / (c + a(D')))
//
//   r_t    a target's tokens per second of busy time: its tokens over wall - queue_wait
//          (a target blocked on a full queue is not working); all target rows pooled
//   b, c   a drafter step's mean tokens and compute seconds: wall - queue_wait (starved)
//          - eval (a held-out evaluation trains nothing) - a(D), the exposed all-reduce
//   a(D)   the drafters' exposed all-reduce per step, comm_wait - comm_overlap, the median
//          over steps (a step whose peer was starved waits longer than the reduction
//          takes). A ring all-reduce moves 2(D-1)/D of the gradient bytes per rank, so
//          a(D') = a(D) * f(D') / f(D), f(D) = 2(D-1)/D, and a(1) = 0. Measured with one
//          drafter there is no all-reduce to measure: its comm_wait (the step's agreement)
//          stays in c, and a(D') for D' >= 2 is unknown, taken as 0 and flagged (those
//          predictions are upper bounds).
//
// Every split T' + D' = T + D with T' >= D' >= 1 (a target streams to one drafter, so each
// drafter needs a target of its own) is predicted from the newest launch's rows;
// the speedup of each is over the model's own prediction for the measured split, so that
// what the model leaves out (oversubscription, the link) cancels as far as it is the same
// for both. A split is recommended only when it predicts at least kMinAdvisedSpeedup.
//
// moe_train (trainers only): per step, fixed costs that one step pays whatever its
// grad_accum (the exposed all-reduce, optimizer, checkpoint) against the rest, which
// grows with the micro-batches. Doubling grad_accum predicts (F + M) / ((F + 2M) / 2) of
// the tokens per second; `other` counts as per-micro-batch, so the gain is not overstated.
#pragma once

#include <string>
#include <vector>

#include "topotrain/store/run_stitch.h"

namespace topotrain {

constexpr double kMinAdvisedSpeedup = 1.05;

struct SplitPrediction {
  int targets = 0, drafters = 0;
  double throughput = 0;  // tokens per second the drafters train
  double speedup = 0;     // over the model's throughput for the measured split
  std::string bound;      // "targets", "drafters" or "balanced" (both within 1%)
};

struct TopologyAdvice {
  bool applicable = false;  // a DFlash launch with target and drafter rows
  std::string reason;       // why not, where not applicable
  int targets = 0, drafters = 0;   // measured split (the newest launch)
  double target_rate = 0;          // r_t
  double drafter_tokens_per_step = 0, drafter_compute_seconds = 0;  // b, c
  double allreduce_seconds = 0;    // a(D) measured, 0 with one drafter
  bool allreduce_known = false;    // false with one drafter: a(D' >= 2) taken as 0
  // Some of the newest launch's ranks shared a GPU (shared_devices.h): their rates are
  // rates while sharing, and a split that changes who shares a GPU changes them, which the
  // model does not know.
  bool ranks_shared_gpus = false;
  double measured_throughput = 0;  // drafters' tokens per second of wall, summed
  SplitPrediction measured;        // the model at the measured split
  std::vector<SplitPrediction> splits;  // every possible split, fastest first; ties keep the measured one first

  // The fastest split if it gains kMinAdvisedSpeedup, else the measured one.
  const SplitPrediction& recommended() const;
};

// Throughput of one split by the model above, from its measured rates.
SplitPrediction predict_split(const TopologyAdvice& rates, int targets, int drafters);

TopologyAdvice advise_topology(const StitchedRun& run);
// The lines topotrain-report prints: the rates, the `shown` fastest splits, the advice.
std::string format_topology_advice(const TopologyAdvice& advice, std::size_t shown);
// The run's topology file (`topology_text`, as its checkpoints keep it; `source` names it
// in messages) re-split to the recommended split (core/topology_split.h), headed by a
// comment saying what the model predicted; ConfigError where it cannot be re-split.
std::string recommended_topology_text(const TopologyAdvice& advice, const std::string& topology_text,
                                      const std::string& source);

struct AccumulationAdvice {
  bool applicable = false;       // a launch of trainers
  double fixed_seconds = 0;      // F: per step
  double per_step_batches_seconds = 0;  // M: the micro-batches' share of a step at its grad_accum
  double doubled_speedup = 1;    // tokens per second at twice the grad_accum, over now
};

AccumulationAdvice advise_accumulation(const StitchedRun& run);
std::string format_accumulation_advice(const AccumulationAdvice& advice);

}  // namespace topotrain
