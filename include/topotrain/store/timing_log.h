// The per-step timing log of a run: every rank times its steps with the log's
// PhaseTimer; every `gather_every` of its own steps a rank ships its rows to rank 0
// (point-to-point, never a collective), which appends what has arrived to the live file
// and publishes it as <run_dir>/timings.h5 (layout: timings_file.h): a copy put in place by
// rename, so that topotrain-report or h5py can read a running job's timings at any moment.
// Copies follow gathers, spaced to take at most 1% of rank 0's time (a small log: after
// every gather), and flush() and flush_local() publish at once. With a GPU and NVML
// present, each rank also samples its GPU; the samples travel with the step rows. A
// resumed run's log starts as a new launch and carries the earlier launches with it (one
// file per run directory, however often it is resumed).
//
//   TimingLog log(run_dir, world, runtime.role(), config);   // collective
//   for (...) {
//     log.timer().begin_step(step);
//     { auto t = log.timer().scope(Phase::forward); ... }
//     log.end_step(metrics);                                   // local; ships every K steps
//   }
//   log.flush();                                               // collective, at the end
//
// Ranks may record different numbers of steps (pipeline stages run at their own pace):
// only the constructor and flush() are collective. On the failure path, where other
// ranks may be gone, flush_local() writes what rank 0 holds without any collective; rows
// other ranks had not yet shipped are lost (at most K steps per rank).
#pragma once

#include <mpi.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "topotrain/store/nvml_sampler.h"
#include "topotrain/store/phase_timer.h"

namespace topotrain {

struct TimingLogConfig {
  int gather_every = 20;            // log.timings_every
  double flops_per_token = 0;       // this rank's model FLOPs per token (forward + backward); 0 = unknown
  double peak_flops = 0;            // this rank's device peak FLOP/s (dense bf16); 0 = unknown
  std::vector<std::string> extra_fields;  // extra per-step columns; the same list on every rank
  int nvml_device = -1;             // CUDA device to sample; -1 = no sampling
  // The lowest world rank on this rank's GPU (itself where it has one of its own), so that
  // the report can add up the FLOPs of ranks that share one; -1 = not a GPU rank.
  int device_group = -1;
  double nvml_hz = 10;
  // Called with each of this rank's steps once its times are known (at its end on CPU, a
  // step later on CUDA, all by flush()), failed steps included: what else follows this
  // rank's phase times (the TensorBoard curves) without timing anything twice.
  std::function<void(const StepRecord&)> on_record;
};

class TimingLog {
 public:
  TimingLog(const std::string& run_dir, MPI_Comm world, const std::string& role, TimingLogConfig config);
  // Writes what rank 0 holds (no collective: a destructor may run while unwinding).
  ~TimingLog();
  TimingLog(const TimingLog&) = delete;
  TimingLog& operator=(const TimingLog&) = delete;

  PhaseTimer& timer() { return timer_; }
  // Ends the timer's step; ships this rank's rows to rank 0 after every gather_every-th call.
  void end_step(StepMetrics metrics);
  // Collective: every rank's remaining rows (waiting for GPU times) reach the file.
  void flush();
  // Not collective: rank 0 writes its own pending rows and flushes the file.
  void flush_local();

  const std::string& path() const { return path_; }  // the published timings.h5
  // This launch's number in the run directory, the same on every rank: 1 for a new one,
  // else one past the highest launch timings.h5 has seen (a launch that recorded no step
  // keeps its number). The number metrics.jsonl, settings.toml and the report use.
  int launch() const { return launch_; }
  // This rank's seconds of `phase` over the steps whose times are known (all of them after
  // flush()): device time where the phase was timed on the device. What a rank's own end
  // line reports, without timing anything twice.
  double phase_total(Phase phase) const { return phase_totals_[static_cast<std::size_t>(phase)]; }

 private:
  struct File;
  void collect_finished();
  void ship(bool last);                 // this rank's pending rows to rank 0 (rank 0: to the file)
  bool receive_shipment(bool blocking);  // rank 0: one shipment into the file; false when none waits
  void complete_sends(bool wait);

  MPI_Comm world_ = MPI_COMM_NULL;  // a duplicate of the caller's communicator: our tags are our own
  int rank_ = 0;
  int world_size_ = 1;
  TimingLogConfig config_;
  std::string path_;
  PhaseTimer timer_;
  std::unique_ptr<NvmlSampler> sampler_;
  std::unique_ptr<File> file_;  // rank 0 only
  int launch_ = 1;
  std::int64_t steps_ = 0;
  std::array<double, kPhaseCount> phase_totals_{};
  int finished_ranks_ = 0;  // rank 0, in flush(): ranks whose last shipment arrived
  // Local rows not yet gathered, row-major in the layout's field order.
  std::vector<double> step_rows_;
  std::vector<double> span_rows_;
  std::vector<double> nvml_rows_;
  // Shipments in flight (buffers live until their MPI_Isend completes).
  std::vector<std::vector<double>> send_buffers_;
  std::vector<MPI_Request> send_requests_;
};

}  // namespace topotrain
