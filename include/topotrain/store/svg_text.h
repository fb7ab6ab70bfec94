// Plain SVG text for topotrain-report's charts, written by our code: the layout every panel
// shares, numbers as attributes, y axes ticked at round values, launch boundaries, and the
// document around the panels.
#pragma once

#include <string>

namespace topotrain {

// A panel: the plot area is kChartWidth - kPlotLeft - kPlotRight wide, and the panel's
// height less kPlotTop and kPlotBottom (room for its title and its x axis) tall.
constexpr double kChartWidth = 1000, kPlotLeft = 80, kPlotRight = 190, kPlotTop = 46, kPlotBottom = 56;

// Panels stacked from y0 down, and their height.
struct SvgPanels {
  std::string svg;
  double height = 0;
};

// 1, 2 or 5 times a power of ten, at least `raw` (> 0).
double nice_step(double raw);
std::string svg_number(double value);  // an attribute: one decimal
std::string tick_label(double value);  // a tick's text: %g

// A y axis's grid line and label of `value` at y.
std::string y_tick(double value, double y);
// Its ticks from `low` to `high` every `tick`; `y_of` maps a value to y.
template <typename YOf>
std::string y_ticks(double low, double high, double tick, YOf y_of) {
  std::string out;
  for (double v = low; v <= high + tick / 2; v += tick) out += y_tick(v, y_of(v));
  return out;
}

// The black x and y axis lines of a plot area from y_top down to base.
std::string plot_axes(double y_top, double base);

// A dashed vertical line from y_top to y_bottom at x, labelled "launch N": where a resumed
// run's launch N begins.
std::string launch_boundary(double x, double y_top, double y_bottom, int launch);

// The whole document: a white background, then `body`.
std::string svg_document(double height, const std::string& body);

}  // namespace topotrain
