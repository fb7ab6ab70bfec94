// The progress line a job's lead rank prints every log.every steps and after its last
// step, the same for every job; fields a job does not report are left out:
//   step 120 | loss 3.2104 aux 0.0102 load 1.31 | lr 3.00e-04 | gnorm 0.81 | 41.2 Ktok/s (10.3 Ktok/s per GPU)
//   | MFU 38.1% | 1 coll | mem 14.10 GiB | ETA 2h13m
// (rates with three significant digits, in tok/s, Ktok/s or Mtok/s by their size: core/log.h's format_rate)
// (aux: the MoE load-balancing loss; load: the peak expert load, model/moe.h's peak_expert_load.)
// CPU ranks add their wait on collectives after MFU ("comm 12%"); on GPUs that is device
// time, in timings.h5 and the report.
// A DFlash drafter adds its draft quality after the loss and its starvation after MFU (and comm):
//   step 120 | loss 2.1034 | tau 2.41 | acc@1 0.612 | lr ... | comm 4% | starved 3% | ...
// On CPU ranks the rate is "per rank" and memory is the resident set ("rss 1.20 GiB").
// Everything but lr, gnorm, coll and memory (the last step's) is over the window of steps
// since the previous line, so a slow first step (warm-up, allocator growth) does not
// haunt the rates or the ETA.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "topotrain/train/draft_quality.h"

namespace topotrain {

struct StepReport {
  std::int64_t step = 0;
  std::int64_t tokens = 0;         // global tokens in this step
  double loss = 0;                 // the step's mean loss (global)
  double loss_weight = 1;          // what `loss` is a mean over (targets, draft slots): the
                                   // line shows the window's weighted mean
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;              // wall time of the step
  // This rank's host wait on collectives (Phase::comm_wait on CPU ranks). Unset on GPUs,
  // where the host does not wait for NCCL and comm_wait is device time known a step
  // later (timings.h5 has it): the line then leaves comm out.
  std::optional<double> comm_seconds;
  double flops = 0;                // the step's model FLOPs over all ranks where they vary per
                                   // step; 0: tokens x ProgressConfig::flops_per_token
  std::int64_t peak_memory = 0;    // bytes, this rank's device (not shown on CPU)
  std::int64_t collectives = 0;    // collectives issued in the step
  std::optional<double> aux_loss;         // an MoE router's load-balancing loss
  std::optional<double> peak_expert_load;  // an MoE's peak_expert_load (model/moe.h), mean over the step
  std::optional<double> starved_seconds;  // time waiting for input (a pipeline stage)
  std::optional<double> eval_loss;        // the held-out loss, on a step that evaluated it
  // Draft quality (DFlash), over all drafters. Empty: not a drafter.
  DraftQuality draft;
  // The same over the held-out documents, on a step that evaluated them (eval_loss is
  // then the drafter's held-out loss). Empty: not evaluated.
  DraftQuality eval_draft;
  // On the first drafter's evaluating steps with train.eval_speculate: the tau of greedy
  // speculative decoding of held-out prompts, and a trivial drafter's on the same prompts.
  std::optional<double> eval_decoded_tau, eval_decoded_trivial_tau;
};

struct ProgressConfig {
  int ranks = 1;                     // ranks whose tokens a step counts
  bool cpu = false;                  // ranks on CPU: "per rank", resident set for memory
  double flops_per_token = 0;        // model FLOPs per trained token (forward + backward)
  double peak_flops = 0;             // one device's peak FLOP/s; 0 = unknown: no MFU
  std::int64_t planned_tokens = 0;  // tokens the run trains (TrainingLength); 0: no ETA by tokens
  std::int64_t max_steps = 0;        // its step limit; 0: none. The ETA is whichever ends first

  // A step's model FLOPs over all ranks: report.flops where the job counts them, else its
  // tokens x flops_per_token.
  double flops_of(const StepReport& report) const;
  // Model FLOPs utilisation of `flops` done in `seconds` on `ranks` devices; nullopt when
  // the peak is unknown or nothing was timed.
  std::optional<double> mfu(double flops, double seconds) const;
  // The memory the line and metrics.jsonl show: the resident set on CPU ranks, else the
  // device's peak allocation of the step.
  std::int64_t memory_bytes(const StepReport& report) const;
};

class ProgressMeter {
 public:
  explicit ProgressMeter(ProgressConfig config);

  // `tokens_done`: global tokens trained so far, this step included.
  void record(const StepReport& report, std::int64_t tokens_done);
  // Whether steps were recorded since the last line (the last step's line is still due).
  bool pending() const { return window_steps_ > 0; }
  // The line for the steps recorded since the previous call; resets the window.
  std::string line();

 private:
  ProgressConfig config_;
  std::int64_t tokens_done_ = 0;
  StepReport last_;
  std::int64_t window_steps_ = 0;
  std::int64_t window_tokens_ = 0;
  double window_seconds_ = 0, window_comm_ = 0, window_flops_ = 0, window_starved_ = 0;
  double window_loss_ = 0, window_weight_ = 0, window_aux_ = 0, window_load_ = 0;
  DraftQuality window_draft_;
};

std::string format_duration(double seconds);  // "2h13m", "45s"

}  // namespace topotrain
