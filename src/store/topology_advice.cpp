#include "topotrain/store/topology_advice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "topotrain/core/error.h"
#include "topotrain/core/topology_split.h"
#include "topotrain/store/phase.h"
#include "topotrain/store/run_report.h"
#include "topotrain/store/shared_devices.h"

namespace topotrain {
namespace {

double phase_of(const StitchedRun& run, const StitchedRow& row, Phase phase) {
  return run.phase_seconds(row, static_cast<std::size_t>(phase));
}

// The all-reduce the step did not hide under backward.
double exposed_comm(const StitchedRun& run, const StitchedRow& row) {
  return std::max(0.0, phase_of(run, row, Phase::comm_wait) - run.value(row, &StepColumns::comm_overlap));
}

// Gradient bytes a rank moves in a ring all-reduce over `ranks`, per byte of gradient.
double ring_factor(int ranks) { return 2.0 * (ranks - 1) / ranks; }

std::string split_name(int targets, int drafters) { return cat(targets, "t", drafters, "d"); }

std::string format_number(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

}  // namespace

SplitPrediction predict_split(const TopologyAdvice& rates, int targets, int drafters) {
  SplitPrediction p;
  p.targets = targets;
  p.drafters = drafters;
  const double allreduce =
      rates.drafters >= 2 ? rates.allreduce_seconds * ring_factor(drafters) / ring_factor(rates.drafters) : 0;
  const double step_seconds = rates.drafter_compute_seconds + allreduce;
  const double target_side = targets * rates.target_rate;
  const double drafter_side = step_seconds > 0 ? drafters * rates.drafter_tokens_per_step / step_seconds : 0;
  p.throughput = std::min(target_side, drafter_side);
  const double larger = std::max(target_side, drafter_side);
  p.bound = larger - p.throughput <= 0.01 * larger ? "balanced" : target_side < drafter_side ? "targets" : "drafters";
  return p;
}

const SplitPrediction& TopologyAdvice::recommended() const {
  if (!splits.empty() && splits.front().speedup >= kMinAdvisedSpeedup) return splits.front();
  return measured;
}

TopologyAdvice advise_topology(const StitchedRun& run) {
  TopologyAdvice advice;
  if (run.launches.empty()) {
    advice.reason = "no launch recorded";
    return advice;
  }
  const std::size_t newest = run.launches.size() - 1;
  const TimingsData& data = run.launches[newest];
  for (const std::string& role : data.roles) {
    if (role == "target") ++advice.targets;
    if (role == "drafter") ++advice.drafters;
  }
  if (advice.targets == 0 || advice.drafters == 0 || advice.targets + advice.drafters != data.world_size) {
    advice.reason = "not a DFlash run of targets and drafters";
    return advice;
  }
  advice.ranks_shared_gpus = !ranks_sharing_gpus(data).empty();
  double target_tokens = 0, target_busy = 0, drafter_tokens = 0, drafter_busy = 0;
  std::size_t drafter_steps = 0;
  std::vector<double> allreduce;
  std::map<int, std::pair<double, double>> per_drafter;  // rank -> (tokens, wall)
  for (const StitchedRow& row : run.rows) {
    if (row.launch != newest) continue;
    const std::string& role = run.role_of(row);
    const double tokens = run.value(row, &StepColumns::tokens);
    const double wall = run.value(row, &StepColumns::wall);
    const double busy = wall - phase_of(run, row, Phase::queue_wait);
    if (role == "target") {
      target_tokens += tokens;
      target_busy += busy;
    } else if (role == "drafter") {
      drafter_tokens += tokens;
      drafter_busy += busy - phase_of(run, row, Phase::eval);  // held-out evaluation: no training
      ++drafter_steps;
      allreduce.push_back(exposed_comm(run, row));
      per_drafter[run.rank_of(row)].first += tokens;
      per_drafter[run.rank_of(row)].second += wall;
    }
  }
  if (target_busy <= 0 || drafter_steps == 0 || drafter_busy <= 0) {
    advice.reason = "the newest launch recorded no working step of both roles";
    return advice;
  }
  advice.applicable = true;
  advice.target_rate = target_tokens / target_busy;
  advice.drafter_tokens_per_step = drafter_tokens / static_cast<double>(drafter_steps);
  advice.allreduce_known = advice.drafters >= 2;
  double allreduce_total = 0;
  for (double a : allreduce) allreduce_total += a;
  // With one drafter comm_wait is no all-reduce (the step's agreement): it stays compute.
  if (advice.allreduce_known) advice.allreduce_seconds = percentile(allreduce, 50);
  advice.drafter_compute_seconds =
      (drafter_busy - (advice.allreduce_known ? allreduce_total : 0)) / static_cast<double>(drafter_steps);
  for (const auto& entry : per_drafter)
    if (entry.second.second > 0) advice.measured_throughput += entry.second.first / entry.second.second;

  advice.measured = predict_split(advice, advice.targets, advice.drafters);
  // A target streams to one drafter, so every drafter needs a target of its own: at most
  // half the ranks draft.
  const int world = advice.targets + advice.drafters;
  for (int drafters = 1; drafters <= world / 2; ++drafters) {
    SplitPrediction p = predict_split(advice, world - drafters, drafters);
    p.speedup = advice.measured.throughput > 0 ? p.throughput / advice.measured.throughput : 0;
    advice.splits.push_back(p);
  }
  advice.measured.speedup = 1;
  // Ties: the measured split first (no change for nothing), then fewer drafters (less
  // all-reduce and a smaller step).
  const int measured_drafters = advice.drafters;
  std::sort(advice.splits.begin(), advice.splits.end(), [&](const SplitPrediction& a, const SplitPrediction& b) {
    if (std::abs(a.throughput - b.throughput) > 1e-9 * std::max(a.throughput, b.throughput))
      return a.throughput > b.throughput;
    if ((a.drafters == measured_drafters) != (b.drafters == measured_drafters)) return a.drafters == measured_drafters;
    return a.drafters < b.drafters;
  });
  return advice;
}

std::string format_topology_advice(const TopologyAdvice& advice, std::size_t shown) {
  if (!advice.applicable) return "";
  std::string text = cat("topology model (newest launch, ", split_name(advice.targets, advice.drafters),
                         "): a target forwards ", format_number("%.0f", advice.target_rate),
                         " tok/s of busy time; a drafter step trains ",
                         format_number("%.0f", advice.drafter_tokens_per_step), " tokens in ",
                         format_number("%.4f", advice.drafter_compute_seconds), " s of compute + ",
                         advice.allreduce_known ? format_number("%.4f", advice.allreduce_seconds) + " s"
                                                : std::string("no"),
                         " all-reduce\n");
  text += cat("  measured ", format_number("%.0f", advice.measured_throughput), " tok/s trained; the model gives ",
              format_number("%.0f", advice.measured.throughput), " tok/s at ",
              split_name(advice.targets, advice.drafters), " (bound by ", advice.measured.bound, ")\n");
  if (!advice.allreduce_known)
    text += "  all-reduce unknown with 1 drafter: taken as free for 2+ drafters, so those predictions are upper bounds\n";
  if (advice.ranks_shared_gpus)
    text += "  ranks shared GPUs (the \"one GPU shared\" lines): these rates were measured while sharing, and a split "
            "that changes who shares a GPU changes them, which the model does not know\n";
  text += "  split     tok/s  speedup  bound\n";
  for (std::size_t i = 0; i < std::min(shown, advice.splits.size()); ++i) {
    const SplitPrediction& p = advice.splits[i];
    char line[128];
    std::snprintf(line, sizeof line, "  %-6s %8.0f  x%-6.2f  %s%s\n", split_name(p.targets, p.drafters).c_str(),
                  p.throughput, p.speedup, p.bound.c_str(),
                  p.targets == advice.targets && p.drafters == advice.drafters ? " (measured)" : "");
    text += line;
  }
  const SplitPrediction& best = advice.recommended();
  if (best.targets == advice.targets)
    text += cat("recommended split: keep ", split_name(advice.targets, advice.drafters), " (no split predicts ",
                format_number("%.0f", (kMinAdvisedSpeedup - 1) * 100), "% more)\n");
  else
    text += cat("recommended split: ", split_name(best.targets, best.drafters), " (x",
                format_number("%.2f", best.speedup), " predicted, bound by ", best.bound, ")\n");
  return text;
}

std::string recommended_topology_text(const TopologyAdvice& advice, const std::string& topology_text,
                                      const std::string& source) {
  const SplitPrediction& best = advice.recommended();
  // A drafter step takes grad_accum batches on each drafter: the step's batch follows D.
  return cat("# Re-split by topotrain-report: ", split_name(best.targets, best.drafters), ", predicted x",
             format_number("%.2f", best.speedup), " over the measured ", split_name(advice.targets, advice.drafters),
             " (bound by ", best.bound, ").\n# A drafter step now trains ", best.drafters,
             " x train.grad_accum batches (was ", advice.drafters, " x).\n",
             resplit_topology(topology_text, source, best.targets, best.drafters));
}

AccumulationAdvice advise_accumulation(const StitchedRun& run) {
  AccumulationAdvice advice;
  if (run.launches.empty()) return advice;
  const std::size_t newest = run.launches.size() - 1;
  double fixed = 0, wall = 0;
  std::size_t steps = 0;
  for (const StitchedRow& row : run.rows) {
    if (row.launch != newest || run.role_of(row) != "trainer") continue;
    fixed += exposed_comm(run, row) + phase_of(run, row, Phase::optimizer) + phase_of(run, row, Phase::checkpoint);
    wall += run.value(row, &StepColumns::wall);
    ++steps;
  }
  if (steps == 0 || wall <= 0) return advice;
  advice.applicable = true;
  advice.fixed_seconds = fixed / static_cast<double>(steps);
  advice.per_step_batches_seconds = std::max(0.0, wall - fixed) / static_cast<double>(steps);
  const double f = advice.fixed_seconds, m = advice.per_step_batches_seconds;
  advice.doubled_speedup = 2 * (f + m) / (f + 2 * m);
  return advice;
}

std::string format_accumulation_advice(const AccumulationAdvice& advice) {
  if (!advice.applicable) return "";
  const double step = advice.fixed_seconds + advice.per_step_batches_seconds;
  const double share = step > 0 ? advice.fixed_seconds / step : 0;
  std::string text = cat("accumulation model: per step ", format_number("%.4f", advice.fixed_seconds),
                         " s fixed (all-reduce not hidden, optimizer, checkpoint: ", format_number("%.0f", share * 100),
                         "%) + ", format_number("%.4f", advice.per_step_batches_seconds),
                         " s of micro-batches; twice train.grad_accum predicts x",
                         format_number("%.2f", advice.doubled_speedup), " tok/s\n");
  text += advice.doubled_speedup >= kMinAdvisedSpeedup
              ? "  lever: train.grad_accum (it amortises the fixed costs without more memory per micro-batch; "
                "train.token_budget amortises them alike but needs the memory)\n"
              : "  lever: neither much; the step is micro-batch work (a larger train.token_budget helps only where "
                "the device is not saturated, a low MFU)\n";
  return text;
}

}  // namespace topotrain
