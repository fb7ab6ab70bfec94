// Learning rate as a function of the schedule's position on its clock: a linear warmup
// over the first `warmup` fraction of `length`, then a cosine decay to `min_ratio` of the
// peak at `length`, held there after. The clock is optimizer steps or tokens consumed
// (the latter keeps the schedule unchanged when a resumed run changes token_budget,
// grad_accum or the number of ranks, and so the tokens per step); which one, and the
// length, are train.schedule's: TrainingLength::schedule_point (run_setup.h) reads them
// off a TrainingState.
#pragma once

#include <cstdint>

namespace topotrain {

struct LrSchedule {
  double peak = 3e-4;
  double min_ratio = 0.1;
  double warmup = 0.04;     // fraction of length
  std::int64_t length = 0;  // in the clock's unit; 0: constant peak

  double at(std::int64_t position) const;
};

}  // namespace topotrain
