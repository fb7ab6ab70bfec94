// Per-step phase timing on one rank.
//
//   timer.begin_step(step);
//   { auto t = timer.scope(Phase::forward); ... }            // CPU time (steady_clock)
//   { auto t = timer.scope(Phase::backward, stream); ... }   // GPU time of `stream` (CUDA builds)
//   timer.end_step(metrics);
//   for (auto& record : timer.take_finished()) ...
//
// CPU scopes are exclusive: a scope opened inside another pauses the outer one, so the
// named phases of a step never add up to more than its wall time and `other` (wall minus
// named phases) stays meaningful. A scope costs two steady_clock reads and one small
// vector append.
//
// Scopes timed on a CUDA stream record two events instead; their times are read without
// stalling: a step's events are resolved when the next step ends (by then its kernels
// have finished in a training loop that synchronises at least once a step), and by
// finish() at the end. GPU scopes measure device time and do not pause CPU scopes.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <vector>

#ifdef TOPOTRAIN_CUDA
#include <cuda_runtime_api.h>
#endif

#include "topotrain/store/phase.h"

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
  std::vector<double> extra;    // values of TimingLogConfig::extra_fields, in that order
};

// One occurrence of a phase inside a step, for the trace. Times in seconds since the
// timer's epoch.
struct PhaseSpan {
  Phase phase;
  double start;
  double seconds;
  bool gpu;  // timed on a CUDA stream (device time), not on the CPU
};

struct StepRecord {
  std::int64_t step = 0;
  double start = 0;  // seconds since the timer's epoch
  double wall = 0;   // seconds from begin_step to end_step
  std::array<double, kPhaseCount> phase_seconds{};
  StepMetrics metrics;
  std::vector<PhaseSpan> spans;

  double named_seconds() const;
  // wall - named phases; negative only when GPU-timed phases overlapped CPU ones.
  double other_seconds() const { return wall - named_seconds(); }
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
    Scope(Scope&& other) noexcept : timer_(other.timer_), index_(other.index_) { other.timer_ = nullptr; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    ~Scope() {
      if (timer_) timer_->close(index_);
    }

   private:
    friend class PhaseTimer;
    Scope(PhaseTimer* timer, int index) : timer_(timer), index_(index) {}
    PhaseTimer* timer_;
    int index_;  // >= 0: CPU scope on the open stack; < 0: GPU scope -(index + 1)
  };

  void begin_step(std::int64_t step);
  [[nodiscard]] Scope scope(Phase phase);
#ifdef TOPOTRAIN_CUDA
  [[nodiscard]] Scope scope(Phase phase, cudaStream_t stream);
#endif
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
#ifdef TOPOTRAIN_CUDA
  struct StreamAnchor {
    cudaStream_t stream;
    cudaEvent_t event;
    double time;  // CPU time when the event was recorded
  };
  struct GpuScope {
    Phase phase;
    cudaStream_t stream;
    cudaEvent_t begin = nullptr;
    cudaEvent_t end = nullptr;
    std::size_t anchor = 0;  // index into the step's anchors
  };
  struct PendingStep {
    StepRecord record;
    std::vector<StreamAnchor> anchors;
    std::vector<GpuScope> scopes;
  };
  cudaEvent_t take_event();
  void resolve(PendingStep& step);
  std::vector<cudaEvent_t> free_events_;
  std::vector<StreamAnchor> anchors_;    // of the open step, one per stream used
  std::vector<GpuScope> gpu_scopes_;     // of the open step
  std::deque<PendingStep> pending_;      // ended, GPU times not yet read
#endif
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
