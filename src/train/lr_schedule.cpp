#include "topotrain/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

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

}  // namespace topotrain
