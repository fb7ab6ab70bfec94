#include "topotrain/store/svg_text.h"

#include <cmath>
#include <cstdio>

#include "topotrain/core/error.h"

namespace topotrain {

double nice_step(double raw) {
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

std::string svg_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

std::string tick_label(double value) {
  char text[32];
  // A value summed up in steps of a tick lands a rounding error away from zero.
  std::snprintf(text, sizeof text, "%g", std::fabs(value) < 1e-9 ? 0.0 : value);
  return text;
}

std::string y_tick(double value, double y) {
  return cat("<line x1=\"", kPlotLeft, "\" x2=\"", kChartWidth - kPlotRight, "\" y1=\"", svg_number(y), "\" y2=\"",
             svg_number(y), "\" stroke=\"#e0e0e0\"/>\n", "<text x=\"", kPlotLeft - 8, "\" y=\"", svg_number(y + 4),
             "\" font-size=\"12\" text-anchor=\"end\">", tick_label(value), "</text>\n");
}

std::string plot_axes(double y_top, double base) {
  return cat("<line x1=\"", kPlotLeft, "\" x2=\"", kChartWidth - kPlotRight, "\" y1=\"", svg_number(base), "\" y2=\"",
             svg_number(base), "\" stroke=\"black\"/>\n", "<line x1=\"", kPlotLeft, "\" x2=\"", kPlotLeft, "\" y1=\"",
             svg_number(y_top), "\" y2=\"", svg_number(base), "\" stroke=\"black\"/>\n");
}

std::string launch_boundary(double x, double y_top, double y_bottom, int launch) {
  return cat("<line class=\"launch-boundary\" x1=\"", svg_number(x), "\" x2=\"", svg_number(x), "\" y1=\"",
             svg_number(y_top), "\" y2=\"", svg_number(y_bottom),
             "\" stroke=\"#444\" stroke-width=\"1.2\" stroke-dasharray=\"5,4\"/>\n", "<text x=\"", svg_number(x + 4),
             "\" y=\"", svg_number(y_top + 12), "\" font-size=\"11\" fill=\"#444\">launch ", launch, "</text>\n");
}

std::string svg_document(double height, const std::string& body) {
  return cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", kChartWidth, "\" height=\"", height,
             "\" viewBox=\"0 0 ", kChartWidth, ' ', height, "\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n",
             "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n", body, "</svg>\n");
}

}  // namespace topotrain
