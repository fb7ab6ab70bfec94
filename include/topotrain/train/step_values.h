// What the lead's per-step logs record of a step, as named values: one list that
// metrics.jsonl (metrics_log.h) writes as JSON and the TensorBoard events
// (tensorboard_log.h) as scalars, so that both show the same numbers under the same names.
// The names are metrics.jsonl's keys (kMetricsKeys) less the line's own step, time and
// launch:
//   tokens (global, this step), tokens_total, loss, lr, grad_norm, step_seconds,
//   tokens_per_s, memory_bytes (device peak, or the resident set on CPU ranks),
//   collectives, skipped (a non-finite step skipped), and where they apply: mfu, aux_loss,
//   peak_expert_load (an MoE's, model/moe.h), starved_seconds, tau (DFlash acceptance
//   length), draft_accuracy (per predicted block slot, 1..B-1), tau_mode and tau_slot_mode
//   (the trivial drafters' tau on the same slots, draft_quality.h), eval_loss (the held-out
//   loss, on the steps that evaluate it), and on a drafter's evaluating steps eval_tau,
//   eval_draft_accuracy, eval_tau_mode and eval_tau_slot_mode (the same over the held-out
//   documents), and with train.eval_speculate eval_decoded_tau and eval_decoded_trivial_tau
//   (greedy speculative decoding of held-out prompts, and a trivial drafter's).
// A value may be any double, NaN included (the loss of a skipped step): each log says
// what it makes of one that is not finite.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "topotrain/train/progress.h"

namespace topotrain {

struct StepValue {
  std::string name;
  std::variant<std::int64_t, double, bool, std::vector<double>> value;
};

// The values of `report` (a step the session completed); `tokens_total`: global tokens
// trained so far, this step included; `skipped`: the step was skipped as not finite.
std::vector<StepValue> step_values(const StepReport& report, std::int64_t tokens_total, bool skipped,
                                   const ProgressConfig& config);

}  // namespace topotrain
