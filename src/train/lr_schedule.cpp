#include "topotrain/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace topotrain {

double LrSchedule::at(std::int64_t tokens) const {
  if (total_tokens <= 0) return peak;
  const double t = static_cast<double>(tokens);
  const double warmup_tokens = warmup * static_cast<double>(total_tokens);
  // Warmup starts above zero so that the very first step already moves the weights.
  if (t < warmup_tokens) return peak * (t + 1.0) / (warmup_tokens + 1.0);
  const double span = std::max(1.0, static_cast<double>(total_tokens) - warmup_tokens);
  const double progress = std::min(1.0, (t - warmup_tokens) / span);
  const double floor = peak * min_ratio;
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace topotrain
