// The learning rate over a run, and when the run stops.
//
// LrSchedule: the rate as a function of the schedule's position on its clock, a linear
// warmup over the first `warmup` fraction of `length`, then a cosine decay to `min_ratio` of
// the peak at `length`, held there after. The clock is optimizer steps or tokens consumed
// (the latter keeps the schedule unchanged when a resumed run changes token_budget,
// grad_accum or the number of ranks, and so the tokens per step).
//
// TrainingLength: when to stop, and the schedule's clock and length (train.schedule). With
// train.schedule = "run" the schedule ends where the run does, as HF Trainer's does with
// max_steps: each limit is measured on its own clock, steps for max_steps and tokens for
// max_tokens or the epochs (epochs x the dataset's tokens), and at every step the schedule
// follows the limit the run is furthest towards, so it reaches its floor at the limit that
// ends the run. No step count is predicted: how many steps max_tokens or the epochs take
// depends on packing, and a resume may change token_budget, grad_accum or the ranks (and a
// shrink after an out-of-memory the budget); the fractions stay exact.
#pragma once

#include <cstdint>
#include <string>

#include "topotrain/core/settings.h"
#include "topotrain/train/run_config.h"
#include "topotrain/train/training_state.h"

namespace topotrain {

struct LrSchedule {
  double peak = 3e-4;
  double min_ratio = 0.1;
  double warmup = 0.04;     // fraction of length
  std::int64_t length = 0;  // in the clock's unit; 0: constant peak

  double at(std::int64_t position) const;
};

struct SchedulePoint {
  std::int64_t position = 0;  // steps taken or tokens trained
  std::int64_t length = 0;    // in the same unit; 0: a constant LR
};

struct TrainingLength {
  std::int64_t max_steps = 0;        // 0: no limit
  std::int64_t stop_tokens = 0;      // 0: no limit (train.max_tokens)
  std::int64_t epochs = 1;           // used when stop_tokens is 0
  std::int64_t dataset_tokens = 0;   // of the training set
  std::int64_t planned_tokens = 0;   // max_tokens, or epochs x dataset tokens
  ScheduleLength schedule = ScheduleLength::run;
  bool done(const TrainingState& state) const;
  // The epoch at which the data ends (data::PackerConfig::end_epoch): `epochs`, or 0 (never)
  // when max_tokens decides.
  std::uint64_t end_epoch() const { return stop_tokens > 0 ? 0 : static_cast<std::uint64_t>(epochs); }
  // Where the LR schedule stands at `state`, on the clock of the limit it follows there.
  SchedulePoint schedule_point(const TrainingState& state) const;
  // "2 epoch(s) or 10 steps, whichever comes first; LR schedule over the run: 10 steps, or
  // 3000 tokens if they come first"
  std::string describe() const;
  // The LR schedule's part of describe(): "over 3000 tokens".
  std::string describe_schedule() const;
};
TrainingLength training_length(const LengthConfig& config, std::int64_t dataset_tokens);

// The learning rate of the step after `state`: LrSchedule at TrainingLength::schedule_point.
double learning_rate(const LrConfig& config, const TrainingLength& length, const TrainingState& state);
// A resumed launch whose LR schedule differs from the one its checkpoint was trained on
// (another train.max_steps, train.epochs, train.schedule, train.lr, ...; `saved`: the
// checkpoint's settings): "LR at step 10: 2.00e-04 under the checkpoint's schedule (over 10
// steps) -> 1.10e-03 now (over 20 steps)". Empty when the LR at `state` is the same.
std::string schedule_change(const Settings& saved, const RunConfig& now, const TrainingLength& length,
                            const TrainingState& state);

}  // namespace topotrain
