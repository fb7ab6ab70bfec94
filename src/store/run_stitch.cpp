#include "topotrain/store/run_stitch.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/store/phase.h"

namespace topotrain {
namespace {

int require_column(const TimingsData& data, const char* field) {
  const int column = data.steps.column(field);
  if (column < 0)
    throw std::runtime_error(cat(data.path, ": the steps table of launch ", data.launch, " has no column '", field,
                                 "' (not a timings file of topotrain?)"));
  return column;
}

std::size_t role_index(const std::vector<std::string>& roles, const std::string& role) {
  return static_cast<std::size_t>(std::find(roles.begin(), roles.end(), role) - roles.begin());
}

}  // namespace

StepColumns::StepColumns(const TimingsData& data)
    : step(require_column(data, "step")),
      rank(require_column(data, "rank")),
      start(require_column(data, "start")),
      wall(require_column(data, "wall")),
      other(require_column(data, "other")),
      tokens(require_column(data, "tokens")),
      loss(require_column(data, "loss")),
      queue_depth(data.steps.column("queue_depth")),
      flops(data.steps.column("flops")),
      overlap(data.steps.column("overlap")),
      comm_overlap(data.steps.column("comm_overlap")),
      checkpoint_writing(data.steps.column("checkpoint_writing")) {
  for (const char* name : phase_names()) phases.push_back(data.steps.column(name));
}

const std::string& StitchedRun::role_of(const StitchedRow& row) const {
  return launches[row.launch].roles[static_cast<std::size_t>(rank_of(row))];
}

int StitchedRun::rank_of(const StitchedRow& row) const {
  return static_cast<int>(value(row, &StepColumns::rank));
}

double StitchedRun::value(const StitchedRow& row, int StepColumns::*column, double absent) const {
  const int c = columns[row.launch].*column;
  return c >= 0 ? launches[row.launch].steps.at(row.row, c) : absent;
}

double StitchedRun::phase_seconds(const StitchedRow& row, std::size_t phase) const {
  const int c = columns[row.launch].phases[phase];
  return c >= 0 ? launches[row.launch].steps.at(row.row, c) : 0;
}

double StitchedRun::phase_or_other(const StitchedRow& row, std::size_t phase) const {
  return phase < kPhaseCount ? phase_seconds(row, phase) : value(row, &StepColumns::other);
}

const char* phase_or_other_name(std::size_t phase) { return phase < kPhaseCount ? phase_names()[phase] : "other"; }

std::map<std::int64_t, RoleStep> role_steps(const StitchedRun& run, const std::string& role) {
  auto busy = [&](const StitchedRow& row) {
    double waited = 0;
    for (std::size_t p = 0; p < kPhaseCount; ++p)
      if (is_wait_phase(static_cast<Phase>(p))) waited += run.phase_seconds(row, p);
    return run.value(row, &StepColumns::wall) - waited;
  };
  std::map<std::int64_t, RoleStep> steps;
  for (const StitchedRow& row : run.rows) {
    if (run.role_of(row) != role) continue;
    RoleStep& step = steps[row.step];
    if (!step.row || busy(row) > busy(*step.row)) step.row = &row;
    step.wall = std::max(step.wall, run.value(row, &StepColumns::wall));
  }
  return steps;
}

bool StitchedRun::is_training(const std::string& role) const {
  const std::size_t i = role_index(roles, role);
  return i < roles.size() && training_roles[i];
}

std::int64_t StitchedRun::repeated_steps() const {
  std::int64_t total = 0;
  for (const RepeatedSteps& r : repeated) total += r.count;
  return total;
}

std::vector<bool> training_ranks(const TimingsData& data) {
  std::vector<bool> trains(static_cast<std::size_t>(data.world_size), false);
  const int rank = data.steps.column("rank"), loss = data.steps.column("loss");
  for (std::size_t row = 0; rank >= 0 && loss >= 0 && row < data.steps.rows; ++row) {
    const auto r = static_cast<std::size_t>(data.steps.at(row, rank));
    if (r < trains.size() && std::isfinite(data.steps.at(row, loss))) trains[r] = true;
  }
  return trains;
}

StitchedRun stitch_launches(std::vector<TimingsData> launches, std::int64_t skip_steps) {
  StitchedRun run;
  run.path = launches.empty() ? std::string() : launches.back().path;
  run.launches = std::move(launches);
  run.skip_steps = skip_steps;
  for (const TimingsData& data : run.launches) {
    run.columns.emplace_back(data);
    for (const std::string& role : data.roles)
      if (role_index(run.roles, role) == run.roles.size()) run.roles.push_back(role);
  }
  run.training_roles.assign(run.roles.size(), false);
  for (const TimingsData& data : run.launches) {
    const std::vector<bool> trains = training_ranks(data);
    for (std::size_t r = 0; r < trains.size(); ++r)
      if (trains[r]) run.training_roles[role_index(run.roles, data.roles[r])] = true;
  }

  // Per launch, its step rows by rank in step order, and their steps in the run's sequence.
  struct Candidate {
    std::size_t row;
    std::int64_t step;
    bool warm_up;
  };
  std::vector<std::vector<Candidate>> candidates(run.launches.size());
  std::vector<std::int64_t> offset(run.roles.size(), 0);  // a non-training role's previous launches' last step
  std::map<std::pair<std::size_t, std::int64_t>, std::size_t> newest;  // (training role, step) -> launch
  for (std::size_t li = 0; li < run.launches.size(); ++li) {
    const TimingsData& data = run.launches[li];
    const StepColumns& c = run.columns[li];
    auto computed_nothing = [&](std::size_t row) {
      if (data.steps.at(row, c.tokens) != 0) return false;
      for (Phase phase : {Phase::forward, Phase::backward, Phase::optimizer}) {
        const int column = c.phases[static_cast<std::size_t>(phase)];
        if (column >= 0 && data.steps.at(row, column) > 0) return false;
      }
      return true;
    };
    std::vector<std::vector<std::size_t>> rows_of_rank(static_cast<std::size_t>(data.world_size));
    for (std::size_t row = 0; row < data.steps.rows; ++row) {
      const double rank = data.steps.at(row, c.rank);
      if (!(rank >= 0 && rank < data.world_size))
        throw std::runtime_error(cat(data.path, ": a step row of launch ", data.launch, " has rank ", rank, " of ",
                                     data.world_size));
      if (!computed_nothing(row)) rows_of_rank[static_cast<std::size_t>(rank)].push_back(row);
    }
    std::vector<std::int64_t> last(run.roles.size(), 0);
    for (std::size_t rank = 0; rank < rows_of_rank.size(); ++rank) {
      std::vector<std::size_t>& rows = rows_of_rank[rank];
      std::stable_sort(rows.begin(), rows.end(),
                       [&](std::size_t a, std::size_t b) { return data.steps.at(a, c.step) < data.steps.at(b, c.step); });
      const std::size_t role = role_index(run.roles, data.roles[rank]);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto own = static_cast<std::int64_t>(data.steps.at(rows[i], c.step));
        const std::int64_t step = run.training_roles[role] ? own : own + offset[role];
        candidates[li].push_back({rows[i], step, static_cast<std::int64_t>(i) < skip_steps});
        last[role] = std::max(last[role], step);
        if (run.training_roles[role]) newest[{role, step}] = li;
      }
    }
    for (std::size_t role = 0; role < run.roles.size(); ++role)
      if (!run.training_roles[role]) offset[role] = std::max(offset[role], last[role]);
  }

  for (std::size_t li = 0; li < run.launches.size(); ++li) {
    std::sort(candidates[li].begin(), candidates[li].end(),
              [](const Candidate& a, const Candidate& b) { return a.row < b.row; });
    std::set<std::int64_t> lost;
    for (const Candidate& candidate : candidates[li]) {
      const StitchedRow row{li, candidate.row, candidate.step};
      const std::size_t role = role_index(run.roles, run.role_of(row));
      if (run.training_roles[role] && newest[{role, candidate.step}] != li) {
        lost.insert(candidate.step);
        continue;
      }
      if (!candidate.warm_up) run.rows.push_back(row);
    }
    if (!lost.empty())
      run.repeated.push_back({run.launches[li].launch, static_cast<std::int64_t>(lost.size()), *lost.begin(),
                              *lost.rbegin()});
  }
  return run;
}

}  // namespace topotrain
