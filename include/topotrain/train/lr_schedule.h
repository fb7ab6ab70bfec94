// Learning rate as a function of tokens consumed, not steps: a linear warmup over the
// first `warmup` fraction of the schedule, then a cosine decay to `min_ratio` of the peak.
// Measuring in tokens keeps the schedule unchanged when a resumed run changes
// token_budget, grad_accum or the number of ranks (and so the tokens per step).
#pragma once

#include <cstdint>

namespace topotrain {

struct LrSchedule {
  double peak = 3e-4;
  double min_ratio = 0.1;
  double warmup = 0.04;       // fraction of total_tokens
  std::int64_t total_tokens = 0;

  double at(std::int64_t tokens) const;
};

}  // namespace topotrain
