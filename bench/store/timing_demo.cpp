// A pipeline-shaped run that only sleeps, for looking at topotrain-report's output: the
// last rank is a drafter whose backward takes longest; the others are targets that wait
// on its queue. Usage: mpirun -np 4 timing_demo RUN_DIR [steps]
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "topotrain/store/timing_log.h"

using namespace topotrain;

namespace {

void busy(PhaseTimer& timer, Phase phase, double ms) {
  auto t = timer.scope(phase);
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc < 2) {
    if (rank == 0) std::fprintf(stderr, "usage: mpirun -np N timing_demo RUN_DIR [steps]\n");
    MPI_Finalize();
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 60;
  const bool drafter = rank == world - 1;
  TimingLogConfig config;
  config.gather_every = 10;
  // Made-up model sizes against an H200's dense bf16 peak, so that MFU shows in the report.
  config.flops_per_token = drafter ? 2.5e9 : 1.5e9;
  config.peak_flops = 989e12;
  {
    TimingLog log(argv[1], MPI_COMM_WORLD, drafter ? "drafter" : "target", config);
    for (int step = 0; step < steps; ++step) {
      PhaseTimer& timer = log.timer();
      timer.begin_step(step);
      StepMetrics metrics;
      const double jitter = (step * 7 + rank * 3) % 5 * 0.3;
      if (drafter) {
        busy(timer, Phase::recv, 1.0);
        busy(timer, Phase::h2d, 0.5);
        busy(timer, Phase::forward, 4.0 + jitter);
        busy(timer, Phase::backward, 9.0 + jitter);
        busy(timer, Phase::optimizer, 1.5);
        if (step % 20 == 19) busy(timer, Phase::checkpoint, 3.0);
        metrics.tokens = 4096;
        metrics.queue_depth = (step % 8) + 2;
        metrics.loss = 5.0 / (1 + 0.05 * step);
      } else {
        busy(timer, Phase::data_wait, 0.3);
        busy(timer, Phase::h2d, 0.4);
        busy(timer, Phase::forward, 5.0 + jitter);
        busy(timer, Phase::queue_wait, step < 5 ? 0.5 : 8.0 - jitter);
        busy(timer, Phase::send, 1.0);
        metrics.tokens = 4096;
      }
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(1.0));  // untimed: `other`
      log.end_step(metrics);
    }
    log.flush();
  }
  MPI_Finalize();
  return 0;
}
