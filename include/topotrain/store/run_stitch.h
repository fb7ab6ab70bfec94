// A resumed run's launches read as one run, as topotrain-report analyses and draws it: per
// role one sequence of steps, each step's rows taken from the newest launch that ran it.
//
// A training role (its ranks record a loss: trainers, drafters) numbers its steps on from
// the checkpoint a launch resumed. Where a later launch ran a step an earlier one had run
// too (the run died after its last checkpoint and trained those steps again), the later
// launch's rows are kept and the earlier ones count as repeated: work that was lost. A role
// that records no loss (a frozen DFlash target) numbers its batches from 1 in every launch;
// its launches are laid end to end instead, each numbered on after the previous one's last.
//
// Launches may run different numbers of ranks, and a rank's role may differ between them: a
// row keeps its launch and that launch's rank, and readers combine ranks within a launch
// (where they share one clock and one rank count) before combining launches.
//
// The warm-up skip applies per launch: each rank's first `skip_steps` steps of every launch
// are left out, since every launch warms up again. Which steps were repeated is decided from
// all rows, so a later launch's warm-up does not bring back the earlier rows it replaced.
// Rows with no tokens and no forward, backward or optimizer time trained nothing (logs of
// older builds end each dflash rank with one): they are not steps and are left out.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "topotrain/store/timings_file.h"

namespace topotrain {

// The /steps columns the report reads, looked up once per launch (older launches may lack
// newer columns): -1 where an optional column is absent; a required one (step, rank, start,
// wall, other, tokens, loss) missing throws, naming the file.
struct StepColumns {
  explicit StepColumns(const TimingsData& data);
  int step, rank, start, wall, other, tokens, loss;
  int queue_depth, flops, overlap, comm_overlap, checkpoint_writing;  // optional
  std::vector<int> phases;                                            // per Phase, optional
};

struct StitchedRow {
  std::size_t launch = 0;  // index into StitchedRun::launches
  std::size_t row = 0;     // row of that launch's steps table
  std::int64_t step = 0;   // the step in the run's one sequence
};

// Steps of one launch that a later launch ran again.
struct RepeatedSteps {
  int launch = 0;  // its launch number
  std::int64_t count = 0, first = 0, last = 0;
};

struct StitchedRun {
  std::string path;
  std::vector<TimingsData> launches;  // oldest first
  std::vector<StepColumns> columns;   // per launch
  std::int64_t skip_steps = 0;
  std::vector<std::string> roles;     // in order of their lowest rank, first launches first
  std::vector<bool> training_roles;   // per role: recorded a loss
  std::vector<StitchedRow> rows;      // the run's steps: launch by launch, each in row order
  std::vector<RepeatedSteps> repeated;  // per earlier launch that had steps run again

  const std::string& role_of(const StitchedRow& row) const;
  int rank_of(const StitchedRow& row) const;
  // A column of the row's launch; `absent` where that launch lacks it.
  double value(const StitchedRow& row, int StepColumns::*column, double absent = 0) const;
  double phase_seconds(const StitchedRow& row, std::size_t phase) const;  // 0 where absent
  // phase_seconds, and for phase == kPhaseCount the row's `other` (phase_or_other_name).
  double phase_or_other(const StitchedRow& row, std::size_t phase) const;
  bool is_training(const std::string& role) const;
  std::int64_t repeated_steps() const;  // sum over `repeated`: step runs whose work was lost
};

// The name of StitchedRun::phase_or_other's `phase`: a phase's, or "other".
const char* phase_or_other_name(std::size_t phase);

// One step of a role as the report tells it: its time is its slowest rank's wall; its phases are
// those of the rank that waited least in it (data_wait, comm_wait, queue_wait), since where ranks
// meet in a collective the others' extra time is waiting for that one.
struct RoleStep {
  const StitchedRow* row = nullptr;  // the rank that waited least
  double wall = 0;
};
// Every step of `role` in `run`, by step number (unique within a role: run_stitch's rules).
std::map<std::int64_t, RoleStep> role_steps(const StitchedRun& run, const std::string& role);

// Throws std::runtime_error naming the file for a row whose rank the launch does not have.
StitchedRun stitch_launches(std::vector<TimingsData> launches, std::int64_t skip_steps);

// Per rank of `data`: it recorded a loss (a finite one) in some step.
std::vector<bool> training_ranks(const TimingsData& data);

}  // namespace topotrain
