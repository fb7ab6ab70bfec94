// The progress line rank 0 prints every log.every steps, and the rates behind it:
//   step 120 | loss 3.2104 aux 0.0102 | lr 3.00e-04 | gnorm 0.81 | 41.2 Ktok/s (10.3 per GPU)
//   | MFU 38.1% | comm 12% | mem 14.1 GiB | ETA 2h13m
// Rates are averaged over the steps since the last line, so a slow first step (warm-up,
// allocator growth) does not haunt the ETA.
#pragma once

#include <cstdint>
#include <string>

namespace topotrain {

struct StepReport {
  std::int64_t step = 0;
  std::int64_t tokens = 0;        // global tokens in this step
  double loss = 0;                // mean per token over the step (global)
  double aux_loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;             // wall time of the step
  double comm_seconds = 0;        // time waiting on gradient collectives
  std::int64_t peak_memory = 0;   // bytes, this rank's device
  std::int64_t collectives = 0;   // collectives issued in the step
};

class ProgressMeter {
 public:
  // flops_per_token: model FLOPs per trained token (forward + backward); peak_flops: one
  // device's peak FLOP/s (0 when unknown: no MFU). target_tokens 0: no ETA.
  ProgressMeter(int devices, double flops_per_token, double peak_flops, std::int64_t target_tokens);

  void record(const StepReport& report, std::int64_t tokens_done);
  // The line for the steps recorded since the previous call; resets the window.
  std::string line();

 private:
  int devices_;
  double flops_per_token_;
  double peak_flops_;
  std::int64_t target_tokens_;
  std::int64_t tokens_done_ = 0;
  StepReport last_;
  std::int64_t window_tokens_ = 0;
  double window_seconds_ = 0;
  double window_comm_ = 0;
};

std::string format_duration(double seconds);  // "2h13m", "45s"

}  // namespace topotrain
