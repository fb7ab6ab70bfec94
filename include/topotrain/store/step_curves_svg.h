// The report chart's curves over the steps of the training roles (those that record a loss,
// run_stitch.h), across every stitched launch with a dashed line where each later launch
// begins: the loss, the mean over the training ranks at each step (as the launch summary's
// last loss), and tokens/s, each training rank's tokens over its wall time, summed over the
// ranks (as the report's tokens/s). One polyline point per step; long runs are binned to at
// most `max_points` points, each the mean of its steps.
#pragma once

#include "topotrain/store/run_stitch.h"
#include "topotrain/store/svg_text.h"

namespace topotrain {

SvgPanels step_curves_svg(const StitchedRun& run, double y0, int max_points = 1000);

}  // namespace topotrain
