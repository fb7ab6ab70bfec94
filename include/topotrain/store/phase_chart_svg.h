// The report chart's phase panels: one per role, steps along x (every stitched launch, a
// dashed line where each later launch begins), the role's mean milliseconds per phase
// stacked along y (`other` on top). Long runs are binned to at most `max_bars` bars per
// panel, each the mean of its steps.
#pragma once

#include "topotrain/store/run_stitch.h"
#include "topotrain/store/svg_text.h"

namespace topotrain {

SvgPanels phase_chart_svg(const StitchedRun& run, double y0, int max_bars = 200);

}  // namespace topotrain
