// Per-step phase timing on one rank.
//
//   timer.begin_step(step);
//   { auto t = timer.scope(Phase::forward); ... }            // CPU time (steady_clock)
//   { auto t = timer.scope(Phase::backward, stream); ... }   // GPU time of `stream` (CUDA builds)
//   timer.add_gpu_spans(Phase::comm_wait, reducer.take_device_spans());  // others' streams
//   timer.end_step(metrics);
//   for (auto& record : timer.take_finished()) ...
//
// CPU scopes are exclusive: a scope opened inside another pauses the outer one, so the
// named phases of a step never add up to more than its wall time and `other` (wall minus
// named phases) stays meaningful. A scope costs two steady_clock reads and one small
// vector append.
//
// Under a profiler (log.profile_step) every scope is also a profiler range named
// "phase:<name>", so that a profiled step's kernels can be told apart by the phase that
// launched them (bench/moe/kernel_table.py); without one that costs a small allocation and a
// check of the profiler's callbacks.
//
// Scopes timed on a CUDA stream record two events instead; their times are read without
// stalling: a step's events are resolved when the next step ends (by then its kernels
// have finished in a training loop that synchronises at least once a step), and by
// finish() at the end. GPU scopes measure device time and do not pause CPU scopes.
//
// Work that other code enqueues on streams of its own (the gradient all-reduce on the NCCL
// stream, the batch copies on the prefetch stream) comes as DeviceSpans
// (core/device_span.h), which add_gpu_spans files under a phase and reads like a GPU scope.
// Device phases on different streams may run at once (the all-reduce under backward):
// each keeps its full device time, and the record says how much was counted twice
// (overlap_seconds) and how much of comm_wait ran under backward (comm_overlap_seconds),
// both read from the events on one device timeline.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <vector>

#ifdef TOPOTRAIN_CUDA
#include <cuda_runtime_api.h>
#endif

#include "topotrain/core/device_span.h"
#include "topotrain/store/phase.h"

namespace at {
struct RecordFunction;
}  // namespace at

namespace topotrain {

// What a trainer knows about a step besides its phase times. NaN = not measured.
struct StepMetrics {
  static constexpr double kUnset = std::numeric_limits<double>::quiet_NaN();
  double tokens = 0;
  double loss = kUnset;
  double lr = kUnset;
  double grad_norm = kUnset;
  double peak_memory_bytes = kUnset;
  double queue_depth = kUnset;  // hidden-state queue depth at step end (pipelines)
  double collectives = 0;       // collectives issued this step
  // Model FLOPs of this step, for ranks whose FLOPs per token vary from step to step (a
  // drafter's depend on the anchors drawn); the report then prefers them to
  // TimingLogConfig::flops_per_token x tokens.
  double flops = kUnset;
  // 1 when a checkpoint write was in flight as the step ended (its agreement), else 0: the
  // steps that ran beside a write, whose cost to training the snapshot's stall does not show.
  double checkpoint_writing = kUnset;
  std::vector<double> extra;    // values of TimingLogConfig::extra_fields, in that order
};

// One occurrence of a phase inside a step, for the trace. Times in seconds since the
// timer's epoch.
struct PhaseSpan {
  Phase phase;
  double start;
  double seconds;
  bool gpu;  // device time (a GPU scope or an added DeviceSpan), not a CPU scope
};

struct StepRecord {
  std::int64_t step = 0;
  double start = 0;  // seconds since the timer's epoch
  double wall = 0;   // seconds from begin_step to end_step
  std::array<double, kPhaseCount> phase_seconds{};
  StepMetrics metrics;
  std::vector<PhaseSpan> spans;
  // Device time counted in two named phases at once: device phases that ran at the same
  // time on different streams. The named phases cover named_seconds() - overlap_seconds.
  double overlap_seconds = 0;
  // Of comm_wait's device time, the part during which backward ran too (the all-reduce
  // hidden under backward); comm_wait minus it is what the step waited for.
  double comm_overlap_seconds = 0;

  double named_seconds() const;
  // Wall minus the time the named phases cover: time nobody timed, or the device idle.
  // Negative only where device time filed in this step ran outside its wall (the host runs
  // ahead of the device; the prefetcher copies a step's batches under the step before).
  double other_seconds() const { return wall - named_seconds() + overlap_seconds; }
};

class PhaseTimer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit PhaseTimer(Clock::time_point epoch = Clock::now()) : epoch_(epoch) {}
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  // Times are reported relative to `epoch`; the timing log sets one epoch on all ranks
  // right after a barrier so that their trace lanes line up.
  void set_epoch(Clock::time_point epoch) { epoch_ = epoch; }

  class Scope {
   public:
    Scope(Scope&& other) noexcept;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    ~Scope();

   private:
    friend class PhaseTimer;
    Scope(PhaseTimer* timer, int index, Phase phase);
    PhaseTimer* timer_;
    int index_;  // >= 0: CPU scope on the open stack; < 0: GPU scope -(index + 1)
    std::unique_ptr<at::RecordFunction> profiler_range_;  // null unless a profiler records
  };

  void begin_step(std::int64_t step);
  [[nodiscard]] Scope scope(Phase phase);
#ifdef TOPOTRAIN_CUDA
  [[nodiscard]] Scope scope(Phase phase, cudaStream_t stream);
#endif
  // Files device time that other code recorded on its own streams under `phase` of the
  // open step (like a GPU scope: not exclusive of CPU scopes, read a step later on CUDA);
  // the timer owns the spans from here on.
  void add_gpu_spans(Phase phase, DeviceSpans spans);
  // Closes the step (every scope of it must be closed). Resolves the GPU times of
  // earlier steps, which may wait for their last kernels.
  void end_step(StepMetrics metrics);
  // Drops the open step without a record: an iteration that trained nothing (the loop's
  // check that finds the run over) is not a step. Every scope of it must be closed.
  void discard_step();
  // Seconds of `phase` in the open step so far, from its closed CPU scopes: what a
  // trainer's progress line reports before the step ends (comm_wait's share).
  double step_seconds(Phase phase) const { return current_.phase_seconds[static_cast<std::size_t>(phase)]; }

  // Records whose times are all known, oldest first, moved out.
  std::vector<StepRecord> take_finished();
  // Waits for every pending GPU time; afterwards take_finished() returns all steps.
  void finish();

  bool in_step() const { return in_step_; }

 private:
  struct OpenScope {
    Phase phase;
    Clock::time_point opened;
    Clock::time_point resumed;  // last time this scope became the innermost one
  };
  struct AddedSpan {
    Phase phase;
    DeviceSpan span;
  };
#ifdef TOPOTRAIN_CUDA
  struct GpuScope {
    Phase phase;
    cudaStream_t stream;
    cudaEvent_t begin = nullptr;
    cudaEvent_t end = nullptr;
  };
  // The step's reference on the device timeline: every event of the step is read against
  // it, so that spans of different streams line up (overlaps), and its CPU time places
  // them in the trace.
  struct Anchor {
    cudaEvent_t event = nullptr;
    double time = 0;  // CPU time when the event was recorded
  };
  struct PendingStep {
    StepRecord record;
    Anchor anchor;
    std::vector<GpuScope> scopes;
    std::vector<AddedSpan> added;
  };
  cudaEvent_t take_event();
  void anchor_on(cudaStream_t stream);
  void resolve(PendingStep& step);
  std::vector<cudaEvent_t> free_events_;
  Anchor anchor_;                        // of the open step; null event until its first device time
  std::vector<GpuScope> gpu_scopes_;     // of the open step
  std::deque<PendingStep> pending_;      // ended, GPU times not yet read
#endif
  std::vector<AddedSpan> added_;         // of the open step
  void close(int index);
  double seconds_since_epoch(Clock::time_point t) const {
    return std::chrono::duration<double>(t - epoch_).count();
  }

  Clock::time_point epoch_;
  Clock::time_point step_begin_;
  bool in_step_ = false;
  StepRecord current_;
  std::vector<OpenScope> open_;
  std::vector<StepRecord> finished_;
};

}  // namespace topotrain
