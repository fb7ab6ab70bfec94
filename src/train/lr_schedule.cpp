#include "topotrain/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "topotrain/core/error.h"

namespace topotrain {

double LrSchedule::at(std::int64_t position) const {
  if (length <= 0) return peak;
  const double t = static_cast<double>(position);
  const double warmup_span = warmup * static_cast<double>(length);
  // Warmup starts above zero so that the very first step already moves the weights.
  if (t < warmup_span) return peak * (t + 1.0) / (warmup_span + 1.0);
  const double span = std::max(1.0, static_cast<double>(length) - warmup_span);
  const double progress = std::min(1.0, (t - warmup_span) / span);
  const double floor = peak * min_ratio;
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

bool TrainingLength::done(const TrainingState& state) const {
  if (max_steps > 0 && state.step >= max_steps) return true;
  if (stop_tokens > 0) return state.tokens >= stop_tokens;
  return static_cast<std::int64_t>(state.data.epoch) >= epochs;
}

SchedulePoint TrainingLength::schedule_point(const TrainingState& state) const {
  const SchedulePoint steps{state.step, max_steps}, tokens{state.tokens, planned_tokens};
  switch (schedule) {
    case ScheduleLength::steps: return steps;
    case ScheduleLength::tokens: return tokens;
    case ScheduleLength::run: break;
  }
  if (max_steps <= 0) return tokens;
  if (planned_tokens <= 0) return steps;
  // The limit the run is furthest towards (compared without division: a * d >= c * b).
  const long double by_steps = static_cast<long double>(steps.position) * tokens.length;
  const long double by_tokens = static_cast<long double>(tokens.position) * steps.length;
  return by_steps >= by_tokens ? steps : tokens;
}

std::string TrainingLength::describe_schedule() const {
  const std::string data_tokens = cat(planned_tokens, " tokens");
  switch (schedule) {
    case ScheduleLength::steps: return cat("over ", max_steps, " steps");
    case ScheduleLength::tokens: return "over " + data_tokens;
    case ScheduleLength::run: break;
  }
  if (max_steps <= 0) return "over " + data_tokens;
  return cat("over the run: ", max_steps, " steps, or ", data_tokens, " if they come first");
}

std::string TrainingLength::describe() const {
  std::string what = stop_tokens > 0 ? cat(stop_tokens, " tokens") : cat(epochs, " epoch(s)");
  if (max_steps > 0) what += cat(" or ", max_steps, " steps, whichever comes first");
  return what + "; LR schedule " + describe_schedule();
}

TrainingLength training_length(const LengthConfig& config, std::int64_t dataset_tokens) {
  TrainingLength length;
  length.max_steps = config.max_steps;
  length.stop_tokens = config.max_tokens;
  length.epochs = config.epochs;
  length.dataset_tokens = dataset_tokens;
  length.planned_tokens = length.stop_tokens > 0 ? length.stop_tokens : length.epochs * dataset_tokens;
  length.schedule = config.schedule;
  return length;
}

double learning_rate(const LrConfig& config, const TrainingLength& length, const TrainingState& state) {
  const SchedulePoint point = length.schedule_point(state);
  return LrSchedule{config.peak, config.min_ratio, config.warmup, point.length}.at(point.position);
}

std::string schedule_change(const Settings& saved, const RunConfig& now, const TrainingLength& length,
                            const TrainingState& state) {
  const TrainingLength before = training_length(length_config_from(saved), length.dataset_tokens);
  const double lr_before = learning_rate(lr_config_from(saved), before, state);
  const double lr_now = learning_rate(now.lr, length, state);
  auto text = [](double lr) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.2e", lr);
    return std::string(buffer);
  };
  if (text(lr_before) == text(lr_now)) return {};
  return cat("LR at step ", state.step, ": ", text(lr_before), " under the checkpoint's schedule (",
             before.describe_schedule(), ") -> ", text(lr_now), " now (", length.describe_schedule(), ")");
}

}  // namespace topotrain
