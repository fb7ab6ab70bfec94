#include "topotrain/train/step_values.h"

#include "topotrain/core/error.h"

namespace topotrain {

std::vector<StepValue> step_values(const StepReport& report, std::int64_t tokens_total, bool skipped,
                                   const ProgressConfig& config) {
  std::vector<StepValue> values = {
      {"tokens", report.tokens},
      {"tokens_total", tokens_total},
      {"loss", report.loss},
      {"lr", report.lr},
      {"grad_norm", report.grad_norm},
      {"step_seconds", report.seconds},
      {"tokens_per_s", report.seconds > 0 ? static_cast<double>(report.tokens) / report.seconds : 0.0},
      {"memory_bytes", config.memory_bytes(report)},
      {"collectives", report.collectives},
      {"skipped", skipped},
  };
  if (const std::optional<double> mfu = config.mfu(config.flops_of(report), report.seconds))
    values.push_back({"mfu", *mfu});
  if (report.aux_loss) values.push_back({"aux_loss", *report.aux_loss});
  if (report.peak_expert_load) values.push_back({"peak_expert_load", *report.peak_expert_load});
  if (report.starved_seconds) values.push_back({"starved_seconds", *report.starved_seconds});
  if (report.eval_loss) values.push_back({"eval_loss", *report.eval_loss});
  // Each drafter value beside the trivial drafters' on the same slots (draft_quality.h).
  auto add_draft = [&](const char* prefix, const DraftQuality& draft) {
    if (draft.empty()) return;
    values.push_back({cat(prefix, "tau"), draft.tau()});
    values.push_back({cat(prefix, "draft_accuracy"), draft.accuracy()});
    values.push_back({cat(prefix, "tau_mode"), draft.mode_tau()});
    values.push_back({cat(prefix, "tau_slot_mode"), draft.slot_mode_tau()});
  };
  add_draft("", report.draft);
  add_draft("eval_", report.eval_draft);
  if (report.eval_decoded_tau) values.push_back({"eval_decoded_tau", *report.eval_decoded_tau});
  if (report.eval_decoded_trivial_tau) values.push_back({"eval_decoded_trivial_tau", *report.eval_decoded_trivial_tau});
  return values;
}

}  // namespace topotrain
