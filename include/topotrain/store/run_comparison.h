// Two runs set side by side, step by step (topotrain-report RUN --compare OTHER): where what
// a setting costs lies in a few steps (the one after a checkpoint's snapshot, say), the two
// reports' means say how much but not where. Per role that both runs have: how the time of
// their common steps differs, phase by phase, and which steps differ most and in what.
//
// Steps are matched by number within a role (role_steps of each stitched run, each after its
// own --skip); a step's time and phases are role_steps' (the slowest rank's wall; the phases of
// the rank that waited least). Differences are this run's minus the other's.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "topotrain/store/run_stitch.h"

namespace topotrain {

// (a phase name or "other", seconds), the largest difference first.
using PhaseDifferences = std::vector<std::pair<std::string, double>>;

struct StepDifference {
  std::int64_t step = 0;
  double wall = 0, other_wall = 0;
  PhaseDifferences phases;  // those differing by more than 1% of the other run's p50 step
};

struct RoleComparison {
  std::string role;
  std::size_t steps = 0;  // in both runs
  std::int64_t first_step = 0, last_step = 0;
  double wall = 0, other_wall = 0;  // summed over those steps
  PhaseDifferences phases;          // summed over those steps; those differing by > 0.1% of other_wall
  // By |wall - other_wall|, at most as many as asked, none within 1% of the other's p50 step.
  std::vector<StepDifference> most_different;
};

// Roles in `run`'s order; one with no step in common is left out.
std::vector<RoleComparison> compare_runs(const StitchedRun& run, const StitchedRun& other, std::size_t steps);

// The text topotrain-report prints after its report.
std::string format_comparison(const std::vector<RoleComparison>& roles, const std::string& other_path);

}  // namespace topotrain
