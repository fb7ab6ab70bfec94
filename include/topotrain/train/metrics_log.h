// metrics.jsonl in the run directory: one JSON object per optimizer step, what a dashboard
// or `tail -f | jq` follows. The group's lead writes it; every line is flushed as it is
// written, and every launch in the directory appends to the same file (as log.txt), so a
// resumed run's curves go on where the last launch stopped (a step that a resume repeats
// after a crash appears again, with the new launch's values). Keys (kMetricsKeys; README.md
// lists the same):
//   step, time (Unix seconds), launch (1 in a new directory, +1 per launch), tokens (global,
//   this step), tokens_total, loss, lr, grad_norm, step_seconds, tokens_per_s, memory_bytes
//   (device peak, or the resident set on CPU ranks), collectives, skipped (a non-finite
//   step skipped), and where they apply: mfu, aux_loss, starved_seconds, tau (DFlash
//   acceptance length), draft_accuracy (per predicted block slot, 1..B-1), eval_loss (the
//   held-out loss, on the steps that evaluate it).
// A value that is not finite (the loss of a skipped step) is written as null.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "topotrain/train/progress.h"

namespace topotrain {

extern const std::vector<std::string> kMetricsKeys;  // every key a line can have
constexpr const char* kMetricsFileName = "metrics.jsonl";

class MetricsLog {
 public:
  // Opens <run_dir>/metrics.jsonl for appending. Throws std::runtime_error naming the file
  // when it cannot be opened.
  MetricsLog(const std::string& run_dir, ProgressConfig config);

  // One line for `report` (a step the session completed); `tokens_total`: global tokens
  // trained so far, this step included.
  void record(const StepReport& report, std::int64_t tokens_total, bool skipped);

 private:
  std::string path_;
  ProgressConfig config_;
  int launch_;
  std::ofstream out_;
};

}  // namespace topotrain
