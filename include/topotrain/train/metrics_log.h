// metrics.jsonl in the run directory: one JSON object per optimizer step, what a dashboard
// or `tail -f | jq` follows. The group's lead writes it; every line is flushed as it is
// written, and every launch in the directory appends to the same file (as log.txt), so a
// resumed run's curves go on where the last launch stopped (a step that a resume repeats
// after a crash appears again, with the new launch's values). Keys (kMetricsKeys; README.md
// lists the same): step, time (Unix seconds), launch (timings.h5's number of the launch,
// TimingLog::launch, so that the two and the report agree), and the step's values (step_values.h). A value that is not finite (the loss of a skipped
// step) is written as null.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "topotrain/train/step_values.h"

namespace topotrain {

extern const std::vector<std::string> kMetricsKeys;  // every key a line can have
constexpr const char* kMetricsFileName = "metrics.jsonl";

class MetricsLog {
 public:
  // Opens <run_dir>/metrics.jsonl for appending; `launch` numbers its lines. Throws
  // std::runtime_error naming the file when it cannot be opened.
  MetricsLog(const std::string& run_dir, int launch);

  // One line for `step` at `time` (Unix seconds) with its `values`.
  void record(std::int64_t step, double time, const std::vector<StepValue>& values);

 private:
  std::string path_;
  int launch_;
  std::ofstream out_;
};

}  // namespace topotrain
