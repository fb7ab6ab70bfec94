// Turns a run's timings into the numbers topotrain-report prints: per role, where the
// step time goes, throughput, MFU, communication and queue depths, and the bottleneck
// in one line, over the launches stitched into one run (run_stitch.h); for a resumed run,
// one line per launch as well.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "topotrain/store/phase_timer.h"
#include "topotrain/store/run_stitch.h"
#include "topotrain/store/shared_devices.h"
#include "topotrain/store/timings_file.h"

namespace topotrain {

// Seconds per step of one phase over the rows of a role.
struct PhaseStats {
  std::string name;  // a phase name, "other" or "wall"
  double share = 0;  // sum of this phase / sum of wall
  double mean = 0;
  double p50 = 0;
  double p95 = 0;
  double total = 0;
};

struct RoleReport {
  std::string role;
  std::vector<int> ranks;  // every launch's ranks of this role
  std::size_t rows = 0;    // (rank, step) rows stitched, after skipping
  std::int64_t first_step = 0;
  std::int64_t last_step = 0;
  std::vector<PhaseStats> phases;  // every Phase in order, then "other"
  PhaseStats wall;
  // Device phases that ran at once on different streams (StepRecord::overlap_seconds):
  // the phases' shares minus this one's, plus other's, make the whole step.
  PhaseStats overlap;
  PhaseStats comm_overlap;       // comm_wait's device time under backward; zero on CPU
  // Summed over a launch's ranks of the role; over several launches, the launches' mean
  // weighted by their time (a resume may run another number of ranks).
  double tokens_per_second = 0;
  double mfu = -1;  // mean over ranks with known FLOPs, launches weighted alike; -1 = unknown
  // Communication the step was not hiding, of wall: comm_wait - comm_overlap + send + recv.
  double comm_share = 0;
  // comm_overlap / comm_wait, the all-reduce's share under backward; -1 = not measured (the
  // role's comm_wait or backward is not device time)
  double comm_hidden = -1;
  double wait_share = 0;         // data_wait + comm_wait - comm_overlap + queue_wait, of wall
  double queue_depth_mean = -1;  // -1 = not recorded
  double queue_depth_max = -1;
  // Rows that ended with a checkpoint write in flight (the timings' checkpoint_writing), and
  // the p50 of wall less the step's own checkpoint phase (a save's snapshot stall, or its
  // wait for the write before) of those and of the rows known to have none: what writing
  // costs the steps beside it. The p50s are -1 unless both kinds of row are there.
  std::size_t rows_beside_write = 0;
  double p50_beside_write = -1;
  double p50_no_write = -1;

  // A step that took longer than the role's typical one: where a run loses time to a few
  // steps (a checkpoint's, a resume's first), the mean says how much, and these say which
  // steps and in what.
  struct SlowStep {
    std::int64_t step = 0;
    int launch = 0;  // its launch number
    int rank = 0;    // the rank that waited least in it (data, comm, queue): the others' cause
    double wall = 0;  // its slowest rank's
    // Of `rank`'s row, each phase (and "other") that took more than 1% of the p50 wall over
    // that phase's p50, as (name, seconds over), the most first.
    std::vector<std::pair<std::string, double>> excess;
    bool beside_write = false;  // it ended with a checkpoint write in flight
  };
  // Slowest first: each step once, only those whose wall exceeds the role's p50 wall by more
  // than kSlowStepMargin, at most as many as asked for.
  std::vector<SlowStep> slowest;

  // A DFlash drafter's draft quality from the timings' tau columns (dflash_train writes them
  // on drafter rows): its teacher-forced tau and the trivial drafters' on the same slots
  // (mode, slot-mode: docs/dflash.md "Metrics"), averaged over the role's last
  // kDraftQualitySteps steps, and those of its last held-out evaluation. steps 0: none recorded.
  struct DraftQuality {
    std::size_t steps = 0;
    double tau = 0, tau_mode = 0, tau_slot_mode = 0;
    std::int64_t eval_step = -1;  // -1: never evaluated
    double eval_tau = 0, eval_tau_mode = 0, eval_tau_slot_mode = 0;
    // The last held-out speculative decoding (train.eval_speculate): tau of the drafter and of
    // a trivial drafter by real decoding; step -1: none.
    std::int64_t decoded_step = -1;
    double decoded_tau = 0, decoded_trivial_tau = 0;
  };
  DraftQuality draft_quality;

  const PhaseStats& phase(const std::string& name) const;
};

constexpr double kSlowStepMargin = 0.05;  // of the p50 wall
constexpr std::size_t kDraftQualitySteps = 20;

struct RunReport {
  std::string path;
  int world_size = 0;                    // the newest launch's
  std::vector<int> launches;             // launch numbers stitched, oldest first
  std::vector<int> launch_world_sizes;   // per launch
  std::int64_t skipped_steps = 0;        // per rank and launch
  std::vector<RepeatedSteps> repeated;   // steps a later launch ran again
  std::vector<RoleReport> roles;  // in order of their lowest rank
  std::vector<SharedDevice> shared_devices;  // GPUs that ranks shared, and their MFU together
  std::string bottleneck;
  std::string bottleneck_phase;  // the slowest role's largest phase that is not a wait
};

// `slowest_steps`: how many of each role's slowest steps to name (RoleReport::slowest).
RunReport analyse_timings(const StitchedRun& run, std::size_t slowest_steps = 3);

// The text topotrain-report prints.
std::string format_report(const RunReport& report);

// What one launch of a run did. Training roles are those that recorded a loss (trainers,
// drafters; a frozen DFlash target records none): their tokens are the launch's tokens,
// counted once per rank that trained them.
struct LaunchSummary {
  int launch = 1;
  int world_size = 0;
  std::string roles;  // "4 trainer", "7 target, 1 drafter"
  std::int64_t first_step = 0;
  std::int64_t last_step = -1;  // < first_step: no step recorded
  double seconds = 0;           // from the first step's start to the last step's end
  double tokens = 0;
  double last_loss = StepMetrics::kUnset;  // mean over the training ranks at the launch's last step
};

LaunchSummary summarise_launch(const TimingsData& data);
// One line per launch, oldest first, and the run's totals.
std::string format_launches(const std::vector<LaunchSummary>& launches);

// Nearest-rank percentile (p in [0, 100]) of unsorted values; 0 for none.
double percentile(std::vector<double> values, double p);

}  // namespace topotrain
