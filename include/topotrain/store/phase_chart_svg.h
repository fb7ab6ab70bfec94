// An SVG chart of where each step's time goes: one panel per role, steps along x, the
// role's mean milliseconds per phase stacked along y (`other` on top). Long runs are
// binned to at most `max_bars` bars per panel, each the mean of its steps.
#pragma once

#include <cstdint>
#include <string>

#include "topotrain/store/timings_file.h"

namespace topotrain {

std::string phase_chart_svg(const TimingsData& data, std::int64_t skip_steps, int max_bars = 200);

}  // namespace topotrain
