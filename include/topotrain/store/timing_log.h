// The per-step timing log of a run: every rank times its steps with the log's
// PhaseTimer; every `gather_every` steps rank 0 gathers all ranks' rows (MPI_Gatherv)
// and appends them to <run_dir>/timings.h5 (layout: timings_file.h). With a GPU and NVML
// present, each rank also samples its GPU; the samples travel with the step rows.
//
//   TimingLog log(run_dir, world, runtime.role(), config);   // collective
//   for (...) {
//     log.timer().begin_step(step);
//     { auto t = log.timer().scope(Phase::forward); ... }
//     log.end_step(metrics);                                   // collective every K steps
//   }
//   log.flush();                                               // collective, at the end
//
// Invariant: every rank calls end_step() the same number of times (once per training
// step, whatever its role) and flush() together, because both may gather. On the
// failure path, where other ranks may be gone, flush_local() writes what rank 0 holds
// without any collective; rows other ranks had not yet sent are lost (at most K steps).
#pragma once

#include <mpi.h>

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
  double nvml_hz = 10;
};

class TimingLog {
 public:
  TimingLog(const std::string& run_dir, MPI_Comm world, const std::string& role, TimingLogConfig config);
  // Writes what rank 0 holds (no collective: a destructor may run while unwinding).
  ~TimingLog();
  TimingLog(const TimingLog&) = delete;
  TimingLog& operator=(const TimingLog&) = delete;

  PhaseTimer& timer() { return timer_; }
  // Ends the timer's step; gathers to rank 0 after every gather_every-th call.
  void end_step(StepMetrics metrics);
  // Collective: gathers every rank's pending rows (waiting for GPU times) and flushes the file.
  void flush();
  // Not collective: rank 0 writes its own pending rows and flushes the file.
  void flush_local();

  const std::string& path() const { return path_; }

 private:
  struct File;
  void collect_finished();
  void gather();
  void append_local_rows();

  MPI_Comm world_;
  int rank_ = 0;
  int world_size_ = 1;
  TimingLogConfig config_;
  std::string path_;
  PhaseTimer timer_;
  std::unique_ptr<NvmlSampler> sampler_;
  std::unique_ptr<File> file_;  // rank 0 only
  std::int64_t steps_ = 0;
  // Local rows not yet gathered, row-major in the layout's field order.
  std::vector<double> step_rows_;
  std::vector<double> span_rows_;
  std::vector<double> nvml_rows_;
};

}  // namespace topotrain
