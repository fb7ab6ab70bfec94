#include "topotrain/store/phase_chart_svg.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "topotrain/core/error.h"
#include "topotrain/store/phase.h"

namespace topotrain {
namespace {

constexpr std::size_t kSeries = kPhaseCount + 1;  // the phases, then other
const char* const kColors[kSeries] = {"#8c564b", "#e377c2", "#1f77b4", "#ff7f0e", "#d62728", "#2ca02c",
                                      "#9467bd", "#17becf", "#bcbd22", "#7f7f7f", "#aec7e8", "#c7c7c7"};

constexpr double kPanelHeight = 330;

struct Bar {
  double first_step = 0, last_step = 0;
  std::size_t launch = 0;  // the launch of its first step
  bool starts_launch = false;  // a later launch than the previous bar's last step begins in it
  std::array<double, kSeries> ms{};
};

// Mean ms per series for each step of `role`, binned into at most max_bars bars.
std::vector<Bar> role_bars(const StitchedRun& run, const std::string& role, int max_bars) {
  struct Step {
    std::array<double, kSeries> sums{};
    int count = 0;
    std::size_t launch = 0;
  };
  std::map<std::int64_t, Step> by_step;
  for (const StitchedRow& row : run.rows) {
    if (run.role_of(row) != role) continue;
    Step& step = by_step[row.step];
    for (std::size_t p = 0; p < kPhaseCount; ++p) step.sums[p] += run.phase_seconds(row, p) * 1e3;
    // Negative `other` (GPU phases overlapping CPU ones) cannot be stacked.
    step.sums[kPhaseCount] += std::max(0.0, run.value(row, &StepColumns::other) * 1e3);
    ++step.count;
    step.launch = row.launch;
  }
  std::vector<Bar> bars;
  if (by_step.empty()) return bars;
  const std::size_t per_bar = (by_step.size() + static_cast<std::size_t>(max_bars) - 1) / static_cast<std::size_t>(max_bars);
  std::size_t in_bar = 0, launch = by_step.begin()->second.launch;
  for (const auto& [step, entry] : by_step) {
    if (in_bar == 0) {
      bars.emplace_back();
      bars.back().first_step = static_cast<double>(step);
      bars.back().launch = entry.launch;
    }
    Bar& bar = bars.back();
    bar.last_step = static_cast<double>(step);
    if (entry.launch > launch) {
      bar.starts_launch = true;
      bar.launch = entry.launch;
    }
    launch = entry.launch;
    for (std::size_t s = 0; s < kSeries; ++s) bar.ms[s] += entry.sums[s] / entry.count;
    if (++in_bar == per_bar) in_bar = 0;
  }
  // Each bar holds per_bar steps except maybe the last.
  const std::size_t last_count = by_step.size() - (bars.size() - 1) * per_bar;
  for (std::size_t b = 0; b < bars.size(); ++b)
    for (double& v : bars[b].ms) v /= static_cast<double>(b + 1 == bars.size() ? last_count : per_bar);
  return bars;
}

// "2 ranks", or "4, then 2 ranks" where launches ran the role on different rank counts.
std::string rank_counts(const StitchedRun& run, const std::string& role) {
  std::vector<int> counts;
  for (const TimingsData& data : run.launches) {
    const auto n = static_cast<int>(std::count(data.roles.begin(), data.roles.end(), role));
    if (n > 0 && (counts.empty() || counts.back() != n)) counts.push_back(n);
  }
  std::string out;
  for (std::size_t i = 0; i < counts.size(); ++i) out += cat(i ? ", then " : "", counts[i]);
  return out + (counts.size() == 1 && counts[0] == 1 ? " rank" : " ranks");
}

}  // namespace

SvgPanels phase_chart_svg(const StitchedRun& run, double y_start, int max_bars) {
  SvgPanels out;
  std::string& svg = out.svg;
  const double plot_width = kChartWidth - kPlotLeft - kPlotRight;
  const double plot_height = kPanelHeight - kPlotTop - kPlotBottom;
  for (std::size_t panel = 0; panel < run.roles.size(); ++panel) {
    const std::string& role = run.roles[panel];
    const double y0 = y_start + kPanelHeight * static_cast<double>(panel);
    const double base = y0 + kPlotTop + plot_height;  // y of 0 ms
    std::vector<Bar> bars = role_bars(run, role, max_bars);
    const std::string ranks = rank_counts(run, role);
    svg += cat("<text x=\"", kPlotLeft, "\" y=\"", y0 + 28, "\" font-size=\"16\" font-weight=\"bold\">Role ", role, " (",
               ranks, "): time per step by phase", ranks == "1 rank" ? "" : ", mean over ranks", "</text>\n");
    if (bars.empty()) {
      svg += cat("<text x=\"", kPlotLeft, "\" y=\"", y0 + kPlotTop + 20, "\" font-size=\"13\">no steps recorded</text>\n");
      continue;
    }
    double top = 0;
    std::array<bool, kSeries> used{};
    for (const Bar& bar : bars) {
      double total = 0;
      for (std::size_t s = 0; s < kSeries; ++s) {
        total += bar.ms[s];
        used[s] = used[s] || bar.ms[s] > 0;
      }
      top = std::max(top, total);
    }
    if (top <= 0) top = 1;
    const double tick = nice_step(top / 5);
    const double y_max = std::ceil(top * 1.05 / tick) * tick;
    auto y_of = [&](double ms) { return base - ms / y_max * plot_height; };
    svg += y_ticks(0, y_max, tick, y_of);
    svg += cat("<text transform=\"translate(", kPlotLeft - 52, ",", svg_number(y0 + kPlotTop + plot_height / 2),
               ") rotate(-90)\" font-size=\"13\" text-anchor=\"middle\">ms per step</text>\n");
    // Bars.
    const double slot = plot_width / static_cast<double>(bars.size());
    const double gap = slot > 4 ? slot * 0.15 : 0;
    for (std::size_t b = 0; b < bars.size(); ++b) {
      double stacked = 0;
      for (std::size_t s = 0; s < kSeries; ++s) {
        if (bars[b].ms[s] <= 0) continue;
        const double y_top = y_of(stacked + bars[b].ms[s]);
        svg += cat("<rect x=\"", svg_number(kPlotLeft + slot * b + gap / 2), "\" y=\"", svg_number(y_top),
                   "\" width=\"", svg_number(std::max(slot - gap, 0.5)), "\" height=\"",
                   svg_number(y_of(stacked) - y_top), "\" fill=\"", kColors[s], "\"/>\n");
        stacked += bars[b].ms[s];
      }
      if (bars[b].starts_launch)
        svg += launch_boundary(kPlotLeft + slot * b, y0 + kPlotTop, base,
                               run.launches[bars[b].launch].launch);
    }
    // x axis: about eight labelled bars.
    svg += plot_axes(y0 + kPlotTop, base);
    const std::size_t every = std::max<std::size_t>(1, (bars.size() + 7) / 8);
    for (std::size_t b = 0; b < bars.size(); b += every) {
      const double x = kPlotLeft + slot * (static_cast<double>(b) + 0.5);
      svg += cat("<line x1=\"", svg_number(x), "\" x2=\"", svg_number(x), "\" y1=\"", svg_number(base), "\" y2=\"",
                 svg_number(base + 5), "\" stroke=\"black\"/>\n");
      svg += cat("<text x=\"", svg_number(x), "\" y=\"", svg_number(base + 19),
                 "\" font-size=\"12\" text-anchor=\"middle\">", tick_label(bars[b].first_step), "</text>\n");
    }
    svg += cat("<text x=\"", svg_number(kPlotLeft + plot_width / 2), "\" y=\"", svg_number(base + 40),
               "\" font-size=\"13\" text-anchor=\"middle\">step",
               bars.size() > 1 && bars[0].last_step > bars[0].first_step ? " (each bar: mean of its steps)" : "",
               "</text>\n");
    // Legend, top of stack first, as the bars read.
    double legend_y = y0 + kPlotTop + 6;
    for (std::size_t s = kSeries; s-- > 0;) {
      if (!used[s]) continue;
      const std::string name = s < kPhaseCount ? phase_names()[s] : "other (untimed)";
      svg += cat("<rect x=\"", kPlotLeft + plot_width + 18, "\" y=\"", svg_number(legend_y),
                 "\" width=\"14\" height=\"14\" fill=\"", kColors[s], "\"/>\n");
      svg += cat("<text x=\"", kPlotLeft + plot_width + 38, "\" y=\"", svg_number(legend_y + 12),
                 "\" font-size=\"13\">", name, "</text>\n");
      legend_y += 21;
    }
  }
  out.height = kPanelHeight * static_cast<double>(run.roles.size());
  return out;
}

}  // namespace topotrain
