#include "topotrain/store/run_comparison.h"

#include <algorithm>
#include <cmath>

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/store/phase.h"
#include "topotrain/store/run_report.h"

namespace topotrain {
namespace {

// Those of `seconds` (per phase, then other) beyond `threshold` either way, the largest first.
PhaseDifferences largest(const std::vector<double>& seconds, double threshold) {
  PhaseDifferences differences;
  for (std::size_t p = 0; p < seconds.size(); ++p)
    if (std::fabs(seconds[p]) > threshold) differences.emplace_back(phase_or_other_name(p), seconds[p]);
  std::stable_sort(differences.begin(), differences.end(),
                   [](const auto& a, const auto& b) { return std::fabs(a.second) > std::fabs(b.second); });
  return differences;
}

std::string signed_ms(double seconds) { return cat(seconds >= 0 ? "+" : "", fixed_point(seconds * 1e3, 1), " ms"); }

std::string listed(const PhaseDifferences& differences, std::size_t most) {
  std::string text;
  for (std::size_t i = 0; i < differences.size() && i < most; ++i)
    text += cat(i ? ", " : "", differences[i].first, " ", signed_ms(differences[i].second));
  return text;
}

}  // namespace

std::vector<RoleComparison> compare_runs(const StitchedRun& run, const StitchedRun& other, std::size_t steps) {
  std::vector<RoleComparison> roles;
  for (const std::string& role : run.roles) {
    const auto mine = role_steps(run, role), theirs = role_steps(other, role);
    RoleComparison comparison;
    comparison.role = role;
    std::vector<double> phase_totals(kPhaseCount + 1, 0.0), other_walls;
    std::vector<StepDifference> all;
    for (const auto& [number, step] : mine) {
      const auto it = theirs.find(number);
      if (it == theirs.end()) continue;
      const RoleStep& that = it->second;
      comparison.first_step = comparison.steps == 0 ? number : comparison.first_step;
      comparison.last_step = number;
      ++comparison.steps;
      comparison.wall += step.wall;
      comparison.other_wall += that.wall;
      other_walls.push_back(that.wall);
      std::vector<double> seconds(kPhaseCount + 1);
      for (std::size_t p = 0; p <= kPhaseCount; ++p) {
        seconds[p] = run.phase_or_other(*step.row, p) - other.phase_or_other(*that.row, p);
        phase_totals[p] += seconds[p];
      }
      all.push_back({number, step.wall, that.wall, largest(seconds, 0)});  // trimmed once the p50 is known
    }
    if (comparison.steps == 0) continue;
    // Steps and phases within 1% of the other run's p50 step differ by noise.
    const double noise = 0.01 * percentile(other_walls, 50);
    all.erase(std::remove_if(all.begin(), all.end(),
                             [&](const StepDifference& d) { return std::fabs(d.wall - d.other_wall) <= noise; }),
              all.end());
    for (StepDifference& difference : all) {
      auto& phases = difference.phases;
      phases.erase(std::remove_if(phases.begin(), phases.end(),
                                  [&](const auto& p) { return std::fabs(p.second) <= noise; }),
                   phases.end());
    }
    std::stable_sort(all.begin(), all.end(), [](const StepDifference& a, const StepDifference& b) {
      return std::fabs(a.wall - a.other_wall) > std::fabs(b.wall - b.other_wall);
    });
    if (all.size() > steps) all.resize(steps);
    comparison.most_different = std::move(all);
    comparison.phases = largest(phase_totals, 0.001 * comparison.other_wall);
    roles.push_back(std::move(comparison));
  }
  return roles;
}

std::string format_comparison(const std::vector<RoleComparison>& roles, const std::string& other_path) {
  std::string out = cat("\nagainst ", other_path, ", step by step (this run minus that one):\n");
  if (roles.empty()) out += "  no step of a role in both runs\n";
  for (const RoleComparison& role : roles) {
    out += cat("role ", role.role, ": ", role.steps, " steps in both (", role.first_step, "..", role.last_step, "), ",
               fixed_point(role.wall, 3), " s against ", fixed_point(role.other_wall, 3), " s (",
               role.other_wall > 0 ? cat(role.wall >= role.other_wall ? "+" : "",
                                         fixed_point((role.wall / role.other_wall - 1) * 100, 1), "%")
                                   : std::string("-"),
               ")\n");
    if (!role.phases.empty()) out += cat("  by phase: ", listed(role.phases, role.phases.size()), "\n");
    if (!role.most_different.empty()) out += "  steps that differ most:\n";
    for (const StepDifference& step : role.most_different) {
      out += cat("    step ", step.step, " ", fixed_point(step.wall * 1e3, 1), " ms against ",
                 fixed_point(step.other_wall * 1e3, 1), " ms (", signed_ms(step.wall - step.other_wall), ")",
                 step.phases.empty() ? "" : ": " + listed(step.phases, 3), "\n");
    }
  }
  return out;
}

}  // namespace topotrain
