#include "topotrain/store/run_chart_svg.h"

#include "topotrain/store/phase_chart_svg.h"
#include "topotrain/store/step_curves_svg.h"

namespace topotrain {

std::string run_chart_svg(const StitchedRun& run) {
  const SvgPanels curves = step_curves_svg(run, 0);
  const SvgPanels phases = phase_chart_svg(run, curves.height);
  return svg_document(curves.height + phases.height + 10, curves.svg + phases.svg);
}

}  // namespace topotrain
