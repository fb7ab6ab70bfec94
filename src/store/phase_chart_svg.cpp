#include "topotrain/store/phase_chart_svg.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>

#include "topotrain/core/error.h"
#include "topotrain/store/phase.h"

namespace topotrain {
namespace {

constexpr std::size_t kSeries = kPhaseCount + 1;  // the phases, then other
const char* const kColors[kSeries] = {"#8c564b", "#e377c2", "#1f77b4", "#ff7f0e", "#d62728", "#2ca02c",
                                      "#9467bd", "#17becf", "#bcbd22", "#7f7f7f", "#aec7e8", "#c7c7c7"};

constexpr double kWidth = 1000, kPanelHeight = 330, kLeft = 80, kRight = 190, kTop = 46, kBottom = 56;

// 1, 2 or 5 times a power of ten, at least `raw`.
double nice_step(double raw) {
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

std::string fmt(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

std::string label(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

struct Bar {
  double first_step = 0, last_step = 0;
  std::array<double, kSeries> ms{};
};

// Mean ms per series for each step of `role`, binned into at most max_bars bars.
std::vector<Bar> role_bars(const TimingsData& data, const std::string& role, std::int64_t skip_steps, int max_bars) {
  const TableData& steps = data.steps;
  const int c_step = steps.column("step"), c_rank = steps.column("rank"), c_other = steps.column("other");
  std::vector<int> c_phase;
  for (const char* name : phase_names()) c_phase.push_back(steps.column(name));
  std::map<std::int64_t, std::pair<std::array<double, kSeries>, int>> by_step;
  std::map<int, std::int64_t> first_step_of_rank;
  for (std::size_t row = 0; row < steps.rows; ++row) {
    const int rank = static_cast<int>(steps.at(row, c_rank));
    if (data.roles[static_cast<std::size_t>(rank)] != role) continue;
    const auto step = static_cast<std::int64_t>(steps.at(row, c_step));
    auto it = first_step_of_rank.find(rank);
    if (it == first_step_of_rank.end() || step < it->second) first_step_of_rank[rank] = step;
  }
  for (std::size_t row = 0; row < steps.rows; ++row) {
    const int rank = static_cast<int>(steps.at(row, c_rank));
    if (data.roles[static_cast<std::size_t>(rank)] != role) continue;
    const auto step = static_cast<std::int64_t>(steps.at(row, c_step));
    if (step < first_step_of_rank[rank] + skip_steps) continue;
    auto& [sums, count] = by_step[step];
    for (std::size_t p = 0; p < kPhaseCount; ++p) sums[p] += c_phase[p] >= 0 ? steps.at(row, c_phase[p]) * 1e3 : 0;
    // Negative `other` (GPU phases overlapping CPU ones) cannot be stacked.
    sums[kPhaseCount] += std::max(0.0, steps.at(row, c_other) * 1e3);
    ++count;
  }
  std::vector<Bar> bars;
  if (by_step.empty()) return bars;
  const std::size_t per_bar = (by_step.size() + static_cast<std::size_t>(max_bars) - 1) / static_cast<std::size_t>(max_bars);
  std::size_t in_bar = 0;
  for (const auto& [step, entry] : by_step) {
    if (in_bar == 0) {
      bars.emplace_back();
      bars.back().first_step = static_cast<double>(step);
    }
    Bar& bar = bars.back();
    bar.last_step = static_cast<double>(step);
    for (std::size_t s = 0; s < kSeries; ++s) bar.ms[s] += entry.first[s] / entry.second;
    if (++in_bar == per_bar) in_bar = 0;
  }
  // Each bar holds per_bar steps except maybe the last.
  const std::size_t last_count = by_step.size() - (bars.size() - 1) * per_bar;
  for (std::size_t b = 0; b < bars.size(); ++b)
    for (double& v : bars[b].ms) v /= static_cast<double>(b + 1 == bars.size() ? last_count : per_bar);
  return bars;
}

}  // namespace

std::string phase_chart_svg(const TimingsData& data, std::int64_t skip_steps, int max_bars) {
  std::vector<std::string> roles;
  for (const std::string& role : data.roles)
    if (std::find(roles.begin(), roles.end(), role) == roles.end()) roles.push_back(role);
  const double height = kPanelHeight * static_cast<double>(roles.size()) + 10;
  std::string svg = cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", kWidth, "\" height=\"", height,
                        "\" viewBox=\"0 0 ", kWidth, ' ', height, "\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n",
                        "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  const double plot_width = kWidth - kLeft - kRight;
  const double plot_height = kPanelHeight - kTop - kBottom;
  for (std::size_t panel = 0; panel < roles.size(); ++panel) {
    const double y0 = kPanelHeight * static_cast<double>(panel);
    const double base = y0 + kTop + plot_height;  // y of 0 ms
    std::vector<Bar> bars = role_bars(data, roles[panel], skip_steps, max_bars);
    int ranks = 0;
    for (const std::string& r : data.roles) ranks += r == roles[panel];
    svg += cat("<text x=\"", kLeft, "\" y=\"", y0 + 28, "\" font-size=\"16\" font-weight=\"bold\">Role ", roles[panel],
               " (", ranks, ranks == 1 ? " rank" : " ranks", "): time per step by phase",
               ranks > 1 ? ", mean over ranks" : "", "</text>\n");
    if (bars.empty()) {
      svg += cat("<text x=\"", kLeft, "\" y=\"", y0 + kTop + 20, "\" font-size=\"13\">no steps recorded</text>\n");
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
    // Grid and y axis.
    for (double v = 0; v <= y_max + tick / 2; v += tick) {
      svg += cat("<line x1=\"", kLeft, "\" x2=\"", kLeft + plot_width, "\" y1=\"", fmt(y_of(v)), "\" y2=\"", fmt(y_of(v)),
                 "\" stroke=\"#e0e0e0\"/>\n");
      svg += cat("<text x=\"", kLeft - 8, "\" y=\"", fmt(y_of(v) + 4), "\" font-size=\"12\" text-anchor=\"end\">",
                 label(v), "</text>\n");
    }
    svg += cat("<text transform=\"translate(", kLeft - 52, ",", fmt(y0 + kTop + plot_height / 2),
               ") rotate(-90)\" font-size=\"13\" text-anchor=\"middle\">ms per step</text>\n");
    // Bars.
    const double slot = plot_width / static_cast<double>(bars.size());
    const double gap = slot > 4 ? slot * 0.15 : 0;
    for (std::size_t b = 0; b < bars.size(); ++b) {
      double stacked = 0;
      for (std::size_t s = 0; s < kSeries; ++s) {
        if (bars[b].ms[s] <= 0) continue;
        const double y_top = y_of(stacked + bars[b].ms[s]);
        svg += cat("<rect x=\"", fmt(kLeft + slot * b + gap / 2), "\" y=\"", fmt(y_top), "\" width=\"",
                   fmt(std::max(slot - gap, 0.5)), "\" height=\"", fmt(y_of(stacked) - y_top), "\" fill=\"", kColors[s],
                   "\"/>\n");
        stacked += bars[b].ms[s];
      }
    }
    // x axis: about eight labelled bars.
    svg += cat("<line x1=\"", kLeft, "\" x2=\"", kLeft + plot_width, "\" y1=\"", fmt(base), "\" y2=\"", fmt(base),
               "\" stroke=\"black\"/>\n");
    svg += cat("<line x1=\"", kLeft, "\" x2=\"", kLeft, "\" y1=\"", fmt(y0 + kTop), "\" y2=\"", fmt(base),
               "\" stroke=\"black\"/>\n");
    const std::size_t every = std::max<std::size_t>(1, (bars.size() + 7) / 8);
    for (std::size_t b = 0; b < bars.size(); b += every) {
      const double x = kLeft + slot * (static_cast<double>(b) + 0.5);
      svg += cat("<line x1=\"", fmt(x), "\" x2=\"", fmt(x), "\" y1=\"", fmt(base), "\" y2=\"", fmt(base + 5),
                 "\" stroke=\"black\"/>\n");
      svg += cat("<text x=\"", fmt(x), "\" y=\"", fmt(base + 19), "\" font-size=\"12\" text-anchor=\"middle\">",
                 label(bars[b].first_step), "</text>\n");
    }
    svg += cat("<text x=\"", fmt(kLeft + plot_width / 2), "\" y=\"", fmt(base + 40),
               "\" font-size=\"13\" text-anchor=\"middle\">step",
               bars.size() > 1 && bars[0].last_step > bars[0].first_step ? " (each bar: mean of its steps)" : "",
               "</text>\n");
    // Legend, top of stack first, as the bars read.
    double legend_y = y0 + kTop + 6;
    for (std::size_t s = kSeries; s-- > 0;) {
      if (!used[s]) continue;
      const std::string name = s < kPhaseCount ? phase_names()[s] : "other (untimed)";
      svg += cat("<rect x=\"", kLeft + plot_width + 18, "\" y=\"", fmt(legend_y), "\" width=\"14\" height=\"14\" fill=\"",
                 kColors[s], "\"/>\n");
      svg += cat("<text x=\"", kLeft + plot_width + 38, "\" y=\"", fmt(legend_y + 12), "\" font-size=\"13\">", name,
                 "</text>\n");
      legend_y += 21;
    }
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace topotrain
