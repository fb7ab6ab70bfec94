#include "topotrain/store/step_curves_svg.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "topotrain/core/error.h"

namespace topotrain {
namespace {

constexpr double kPanelHeight = 260;

struct Point {
  double step = 0, value = 0;
};

// Mean of every `per` points, in order.
std::vector<Point> binned(const std::vector<Point>& points, std::size_t per) {
  if (per <= 1) return points;
  std::vector<Point> out;
  for (std::size_t i = 0; i < points.size(); i += per) {
    const std::size_t end = std::min(points.size(), i + per);
    Point mean;
    for (std::size_t j = i; j < end; ++j) {
      mean.step += points[j].step;
      mean.value += points[j].value;
    }
    mean.step /= static_cast<double>(end - i);
    mean.value /= static_cast<double>(end - i);
    out.push_back(mean);
  }
  return out;
}

struct Axis {
  double first = 0, last = 0;  // steps at the plot's left and right edges
  double x_of(double step) const {
    const double width = kChartWidth - kPlotLeft - kPlotRight;
    return last > first ? kPlotLeft + (step - first) / (last - first) * width : kPlotLeft + width / 2;
  }
};

// One panel of a value per step, binned to at most max_points points, from y0, with the
// launch boundaries and x ticks.
std::string curve_panel(const std::string& title, const std::string& css_class, const char* color,
                        const std::vector<Point>& steps, std::size_t max_points, const Axis& axis,
                        const std::vector<std::pair<double, int>>& boundaries, double y0) {
  std::string svg = cat("<text x=\"", kPlotLeft, "\" y=\"", y0 + 28, "\" font-size=\"16\" font-weight=\"bold\">",
                        title, "</text>\n");
  const double plot_height = kPanelHeight - kPlotTop - kPlotBottom;
  const double base = y0 + kPlotTop + plot_height;
  const std::size_t per = (steps.size() + max_points - 1) / max_points;
  const std::vector<Point> points = binned(steps, per);
  if (points.empty()) {
    return svg + cat("<text x=\"", kPlotLeft, "\" y=\"", y0 + kPlotTop + 20,
                     "\" font-size=\"13\">none recorded</text>\n");
  }
  double low = points.front().value, high = low;
  for (const Point& p : points) {
    low = std::min(low, p.value);
    high = std::max(high, p.value);
  }
  const double tick = nice_step(high > low ? (high - low) / 4 : std::max(std::fabs(high) / 4, 1e-6));
  low = std::floor(low / tick) * tick;
  high = std::max(std::ceil(high / tick) * tick, low + tick);
  auto y_of = [&](double v) { return base - (v - low) / (high - low) * plot_height; };
  svg += y_ticks(low, high, tick, y_of);
  std::string coordinates;
  for (const Point& p : points)
    coordinates += cat(coordinates.empty() ? "" : " ", svg_number(axis.x_of(p.step)), ',', svg_number(y_of(p.value)));
  svg += cat("<polyline class=\"", css_class, "\" fill=\"none\" stroke=\"", color,
             "\" stroke-width=\"1.5\" points=\"", coordinates, "\"/>\n");
  for (const auto& [step, launch] : boundaries) svg += launch_boundary(axis.x_of(step), y0 + kPlotTop, base, launch);
  svg += plot_axes(y0 + kPlotTop, base);
  const double x_tick = nice_step(std::max(1.0, (axis.last - axis.first) / 8));
  for (double step = std::ceil(axis.first / x_tick) * x_tick; step <= axis.last; step += x_tick) {
    const double x = axis.x_of(step);
    svg += cat("<line x1=\"", svg_number(x), "\" x2=\"", svg_number(x), "\" y1=\"", svg_number(base), "\" y2=\"",
               svg_number(base + 5), "\" stroke=\"black\"/>\n", "<text x=\"", svg_number(x), "\" y=\"",
               svg_number(base + 19), "\" font-size=\"12\" text-anchor=\"middle\">", tick_label(step), "</text>\n");
  }
  svg += cat("<text x=\"", svg_number(kPlotLeft + (kChartWidth - kPlotLeft - kPlotRight) / 2), "\" y=\"",
             svg_number(base + 40), "\" font-size=\"13\" text-anchor=\"middle\">step",
             per > 1 ? cat(" (each point: mean of ", per, " steps)") : "",
             "</text>\n");
  return svg;
}

}  // namespace

SvgPanels step_curves_svg(const StitchedRun& run, double y0, int max_points) {
  struct Step {
    double loss_sum = 0, tokens_per_second = 0;
    int losses = 0;
    bool timed = false;
    std::size_t launch = 0;
  };
  std::map<std::int64_t, Step> by_step;
  std::string roles;
  for (std::size_t r = 0; r < run.roles.size(); ++r)
    if (run.training_roles[r]) roles += (roles.empty() ? "" : ", ") + run.roles[r];
  for (const StitchedRow& row : run.rows) {
    if (!run.is_training(run.role_of(row))) continue;
    Step& step = by_step[row.step];
    const double loss = run.value(row, &StepColumns::loss);
    if (std::isfinite(loss)) {
      step.loss_sum += loss;
      ++step.losses;
    }
    const double wall = run.value(row, &StepColumns::wall);
    if (wall > 0) {
      step.tokens_per_second += run.value(row, &StepColumns::tokens) / wall;
      step.timed = true;
    }
    step.launch = std::max(step.launch, row.launch);
  }
  std::vector<Point> loss, tokens_per_second;
  std::vector<std::pair<double, int>> boundaries;  // step, launch number
  Axis axis;
  if (!by_step.empty()) axis = {static_cast<double>(by_step.begin()->first), static_cast<double>(by_step.rbegin()->first)};
  const Step* previous = nullptr;
  std::int64_t previous_step = 0;
  for (const auto& [step, entry] : by_step) {
    if (entry.losses > 0) loss.push_back({static_cast<double>(step), entry.loss_sum / entry.losses});
    if (entry.timed) tokens_per_second.push_back({static_cast<double>(step), entry.tokens_per_second});
    if (previous && entry.launch > previous->launch)
      boundaries.emplace_back(0.5 * static_cast<double>(previous_step + step), run.launches[entry.launch].launch);
    previous = &entry;
    previous_step = step;
  }
  const auto most = static_cast<std::size_t>(std::max(1, max_points));
  const std::string of = roles.empty() ? std::string("no role records a loss") : roles;
  SvgPanels out;
  out.svg = curve_panel(cat("Loss (", of, ": mean over the ranks)"), "loss", "#d62728", loss, most, axis,
                        boundaries, y0) +
            curve_panel(cat("Tokens/s (", of, ": summed over the ranks)"), "tokens-per-second", "#1f77b4",
                        tokens_per_second, most, axis, boundaries, y0 + kPanelHeight);
  out.height = 2 * kPanelHeight;
  return out;
}

}  // namespace topotrain
