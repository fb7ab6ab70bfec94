// What `topotrain-report --plot` writes: one SVG of a run over its steps, every stitched
// launch: the loss and tokens/s curves (step_curves_svg.h) on top, then a panel per role of
// where its step time went (phase_chart_svg.h).
#pragma once

#include <string>

#include "topotrain/store/run_stitch.h"

namespace topotrain {

std::string run_chart_svg(const StitchedRun& run);

}  // namespace topotrain
