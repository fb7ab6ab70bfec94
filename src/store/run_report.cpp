#include "topotrain/store/run_report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/store/phase.h"

namespace topotrain {
namespace {

PhaseStats stats_of(const std::string& name, const std::vector<double>& values, double wall_total) {
  PhaseStats s;
  s.name = name;
  for (double v : values) s.total += v;
  s.mean = values.empty() ? 0 : s.total / static_cast<double>(values.size());
  s.p50 = percentile(values, 50);
  s.p95 = percentile(values, 95);
  s.share = wall_total > 0 ? s.total / wall_total : 0;
  return s;
}

// "queue_wait" -> "queue" for "waits on queue".
std::string wait_object(const std::string& phase) { return phase.substr(0, phase.find('_')); }

std::string percent(double share) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f%%", share * 100);
  return text;
}

// Names the bottleneck in `report` from its roles.
void name_bottleneck(RunReport& report) {
  const std::vector<RoleReport>& roles = report.roles;
  if (roles.empty()) {
    report.bottleneck = "no steps recorded";
    return;
  }
  // The role that waits least is the one the others wait for. Comm waited for is what
  // the device did not hide under backward.
  auto waited = [](const RoleReport& role, std::size_t phase) {
    const PhaseStats& p = role.phases[phase];
    return static_cast<Phase>(phase) == Phase::comm_wait ? p.share - role.comm_overlap.share : p.share;
  };
  const RoleReport* slowest = &roles.front();
  for (const RoleReport& role : roles)
    if (role.wait_share < slowest->wait_share) slowest = &role;
  const PhaseStats* top = nullptr;
  for (std::size_t i = 0; i < slowest->phases.size(); ++i) {
    const PhaseStats& p = slowest->phases[i];
    const bool wait = i < kPhaseCount && is_wait_phase(static_cast<Phase>(i));
    if (!wait && (!top || p.share > top->share)) top = &p;
  }
  std::string line = cat(slowest->role, ' ', top->name == "other" ? "other (untimed code)" : top->name, " is ",
                         percent(top->share), " of step");
  for (const RoleReport& role : roles) {
    if (role.wait_share < 0.10) continue;
    std::size_t wait = kPhaseCount;
    for (std::size_t i = 0; i < kPhaseCount; ++i)
      if (is_wait_phase(static_cast<Phase>(i)) && (wait == kPhaseCount || waited(role, i) > waited(role, wait))) wait = i;
    const std::string who = &role == slowest ? "it" : role.role;
    line += cat("; ", who, " waits on ", wait_object(role.phases[wait].name), ' ', percent(waited(role, wait)));
  }
  report.bottleneck = line;
  report.bottleneck_phase = top->name;
}

// Of `role`'s steps in `run`, the slowest `count` more than kSlowStepMargin over its p50 wall
// (role_steps' time and row), with what they spent over each phase's p50 (`role`'s statistics,
// from the same rows).
std::vector<RoleReport::SlowStep> slowest_steps(const StitchedRun& run, const RoleReport& role, std::size_t count) {
  if (role.wall.p50 <= 0) return {};  // no typical step to be slower than
  std::vector<RoleStep> slow;
  for (const auto& [number, step] : role_steps(run, role.role))
    if (step.wall > (1 + kSlowStepMargin) * role.wall.p50) slow.push_back(step);
  std::stable_sort(slow.begin(), slow.end(), [](const RoleStep& a, const RoleStep& b) { return a.wall > b.wall; });
  if (slow.size() > count) slow.resize(count);
  std::vector<RoleReport::SlowStep> steps;
  for (const RoleStep& slow_step : slow) {
    const StitchedRow& row = *slow_step.row;
    RoleReport::SlowStep step;
    step.step = row.step;
    step.launch = run.launches[row.launch].launch;
    step.rank = run.rank_of(row);
    step.wall = slow_step.wall;
    for (std::size_t p = 0; p <= kPhaseCount; ++p) {
      const double over = run.phase_or_other(row, p) - role.phases[p].p50;
      if (over > 0.01 * role.wall.p50) step.excess.emplace_back(role.phases[p].name, over);
    }
    std::stable_sort(step.excess.begin(), step.excess.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    step.beside_write = run.value(row, &StepColumns::checkpoint_writing, StepMetrics::kUnset) == 1;
    steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace

const PhaseStats& RoleReport::phase(const std::string& name) const {
  for (const PhaseStats& p : phases)
    if (p.name == name) return p;
  throw std::out_of_range("no phase " + name);
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const std::size_t index = static_cast<std::size_t>(std::max(1.0, rank)) - 1;
  return values[std::min(index, values.size() - 1)];
}

// RoleReport::draft_quality of `role`: its rows that recorded a tau, in run order, each
// launch's columns looked up by name (a launch from before the trivial drafters has none).
RoleReport::DraftQuality draft_quality_of(const StitchedRun& run, const std::string& role) {
  const char* names[8] = {"tau",          "tau_mode",           "tau_slot_mode",    "eval_tau",
                          "eval_tau_mode", "eval_tau_slot_mode", "eval_decoded_tau", "eval_decoded_trivial_tau"};
  std::vector<std::array<double, 3>> steps;  // per drafter step: its three taus, over the role's ranks
  RoleReport::DraftQuality quality;
  std::int64_t last_step = -1;
  for (const StitchedRow& row : run.rows) {
    const TimingsData& data = run.launches[row.launch];
    if (data.roles[static_cast<std::size_t>(run.rank_of(row))] != role) continue;
    std::array<int, 8> columns{};
    for (std::size_t i = 0; i < 8; ++i) columns[i] = data.steps.column(names[i]);
    if (columns[0] < 0 || columns[1] < 0 || columns[2] < 0) continue;  // not a drafter's row, or an older file
    auto at = [&](std::size_t i) { return columns[i] < 0 ? StepMetrics::kUnset : data.steps.at(row.row, columns[i]); };
    if (!std::isfinite(at(0))) continue;
    // Every drafter of a step logs the agreed values: one entry per step.
    if (row.step != last_step) steps.push_back({at(0), at(1), at(2)});
    last_step = row.step;
    if (std::isfinite(at(3)) && std::isfinite(at(4)) && std::isfinite(at(5))) {
      quality.eval_step = row.step;
      quality.eval_tau = at(3), quality.eval_tau_mode = at(4), quality.eval_tau_slot_mode = at(5);
    }
    if (std::isfinite(at(6)) && std::isfinite(at(7))) {
      quality.decoded_step = row.step;
      quality.decoded_tau = at(6), quality.decoded_trivial_tau = at(7);
    }
  }
  const std::size_t first = steps.size() > kDraftQualitySteps ? steps.size() - kDraftQualitySteps : 0;
  quality.steps = steps.size() - first;
  for (std::size_t i = first; i < steps.size(); ++i) {
    quality.tau += steps[i][0] / static_cast<double>(quality.steps);
    quality.tau_mode += steps[i][1] / static_cast<double>(quality.steps);
    quality.tau_slot_mode += steps[i][2] / static_cast<double>(quality.steps);
  }
  return quality;
}

RunReport analyse_timings(const StitchedRun& run, std::size_t slowest_count) {
  RunReport report;
  report.path = run.path;
  for (const TimingsData& data : run.launches) {
    report.launches.push_back(data.launch);
    report.launch_world_sizes.push_back(data.world_size);
  }
  report.world_size = run.launches.empty() ? 0 : run.launches.back().world_size;
  report.skipped_steps = run.skip_steps;
  report.repeated = run.repeated;

  // Per launch and rank: its rows, whether its comm_wait and backward are both device time
  // (spans timed on a stream: only there does comm_overlap say how much of the all-reduce
  // backward hid), and its FLOPs per token and peak.
  struct RankData {
    std::vector<const StitchedRow*> rows;
    std::array<bool, kPhaseCount> on_device{};
    double flops_per_token = 0, peak = 0;
  };
  std::vector<std::vector<RankData>> ranks(run.launches.size());
  for (std::size_t li = 0; li < run.launches.size(); ++li) {
    const TimingsData& data = run.launches[li];
    std::vector<RankData>& of_rank = ranks[li];
    of_rank.resize(static_cast<std::size_t>(data.world_size));
    const int s_rank = data.spans.column("rank"), s_phase = data.spans.column("phase"), s_gpu = data.spans.column("gpu");
    for (std::size_t row = 0; s_rank >= 0 && s_phase >= 0 && s_gpu >= 0 && row < data.spans.rows; ++row) {
      const auto rank = static_cast<std::size_t>(data.spans.at(row, s_rank));
      const auto index = static_cast<std::size_t>(data.spans.at(row, s_phase));
      if (rank >= of_rank.size() || index >= data.span_phases.size() || data.spans.at(row, s_gpu) == 0) continue;
      for (std::size_t p = 0; p < kPhaseCount; ++p)
        if (data.span_phases[index] == phase_names()[p]) of_rank[rank].on_device[p] = true;
    }
    const std::vector<RankRecord> records = rank_records(data);
    for (std::size_t rank = 0; rank < of_rank.size(); ++rank) {
      of_rank[rank].flops_per_token = records[rank].flops_per_token;
      of_rank[rank].peak = records[rank].peak_flops;
    }
  }
  for (const StitchedRow& row : run.rows)
    ranks[row.launch][static_cast<std::size_t>(run.rank_of(row))].rows.push_back(&row);

  for (const std::string& role_name : run.roles) {
    RoleReport role;
    role.role = role_name;
    std::vector<std::vector<double>> phase_values(kPhaseCount + 1);
    std::vector<double> walls, queue, overlaps, comm_overlaps, beside_write, no_write;
    // A launch's tokens/s (summed over its ranks) and MFU (their mean) are combined over
    // the launches weighted by each launch's time (its ranks' mean summed wall).
    double weighted_rate = 0, rate_time = 0, weighted_mfu = 0, mfu_time = 0;
    bool any_row = false;
    bool device_comm = false;
    for (std::size_t li = 0; li < run.launches.size(); ++li) {
      const TimingsData& data = run.launches[li];
      double launch_rate = 0, launch_wall = 0, mfu_sum = 0;
      int ranks_with_rows = 0, mfu_ranks = 0;
      for (int rank = 0; rank < data.world_size; ++rank) {
        if (data.roles[static_cast<std::size_t>(rank)] != role_name) continue;
        if (std::find(role.ranks.begin(), role.ranks.end(), rank) == role.ranks.end()) role.ranks.push_back(rank);
        const RankData& rank_data = ranks[li][static_cast<std::size_t>(rank)];
        device_comm = device_comm || (rank_data.on_device[static_cast<std::size_t>(Phase::comm_wait)] &&
                                      rank_data.on_device[static_cast<std::size_t>(Phase::backward)]);
        double rank_tokens = 0, rank_wall = 0, rank_flops = 0;
        for (const StitchedRow* row : rank_data.rows) {
          role.first_step = any_row ? std::min(role.first_step, row->step) : row->step;
          role.last_step = any_row ? std::max(role.last_step, row->step) : row->step;
          any_row = true;
          ++role.rows;
          for (std::size_t p = 0; p <= kPhaseCount; ++p) phase_values[p].push_back(run.phase_or_other(*row, p));
          const double wall = run.value(*row, &StepColumns::wall);
          walls.push_back(wall);
          const double writing = run.value(*row, &StepColumns::checkpoint_writing, StepMetrics::kUnset);
          const double outside_checkpoint = wall - run.phase_seconds(*row, static_cast<std::size_t>(Phase::checkpoint));
          if (writing == 1) beside_write.push_back(outside_checkpoint);
          if (writing == 0) no_write.push_back(outside_checkpoint);
          overlaps.push_back(run.value(*row, &StepColumns::overlap));
          comm_overlaps.push_back(run.value(*row, &StepColumns::comm_overlap));
          rank_tokens += run.value(*row, &StepColumns::tokens);
          rank_wall += wall;
          const double depth = run.value(*row, &StepColumns::queue_depth, StepMetrics::kUnset);
          if (!std::isnan(depth)) queue.push_back(depth);
          const double flops = run.value(*row, &StepColumns::flops);
          if (flops > 0) rank_flops += flops;
        }
        if (rank_wall <= 0) continue;
        const double tokens_per_second = rank_tokens / rank_wall;
        launch_rate += tokens_per_second;
        launch_wall += rank_wall;
        ++ranks_with_rows;
        // A step's own FLOPs (where they vary per step) take precedence over FLOPs per token.
        if (rank_data.peak > 0 && (rank_flops > 0 || rank_data.flops_per_token > 0)) {
          mfu_sum += (rank_flops > 0 ? rank_flops / rank_wall : rank_data.flops_per_token * tokens_per_second) /
                     rank_data.peak;
          ++mfu_ranks;
        }
      }
      if (ranks_with_rows == 0) continue;
      const double launch_time = launch_wall / ranks_with_rows;
      weighted_rate += launch_rate * launch_time;
      rate_time += launch_time;
      if (mfu_ranks > 0) {
        weighted_mfu += mfu_sum / mfu_ranks * launch_time;
        mfu_time += launch_time;
      }
    }
    std::sort(role.ranks.begin(), role.ranks.end());
    if (rate_time > 0) role.tokens_per_second = weighted_rate / rate_time;
    if (mfu_time > 0) role.mfu = weighted_mfu / mfu_time;
    double wall_total = 0;
    for (double w : walls) wall_total += w;
    role.wall = stats_of("wall", walls, wall_total);
    role.overlap = stats_of("overlap", overlaps, wall_total);
    role.comm_overlap = stats_of("comm_overlap", comm_overlaps, wall_total);
    for (std::size_t p = 0; p <= kPhaseCount; ++p) {
      role.phases.push_back(stats_of(phase_or_other_name(p), phase_values[p], wall_total));
      if (p < kPhaseCount && is_comm_phase(static_cast<Phase>(p))) role.comm_share += role.phases.back().share;
      if (p < kPhaseCount && is_wait_phase(static_cast<Phase>(p))) role.wait_share += role.phases.back().share;
    }
    role.comm_share -= role.comm_overlap.share;
    role.wait_share -= role.comm_overlap.share;
    const double comm_wait = role.phase(phase_name(Phase::comm_wait)).total;
    if (comm_wait > 0 && device_comm) role.comm_hidden = role.comm_overlap.total / comm_wait;
    if (!queue.empty()) {
      double sum = 0;
      for (double q : queue) sum += q;
      role.queue_depth_mean = sum / static_cast<double>(queue.size());
      role.queue_depth_max = *std::max_element(queue.begin(), queue.end());
    }
    role.rows_beside_write = beside_write.size();
    if (!beside_write.empty() && !no_write.empty()) {
      role.p50_beside_write = percentile(beside_write, 50);
      role.p50_no_write = percentile(no_write, 50);
    }
    role.slowest = slowest_steps(run, role, slowest_count);
    role.draft_quality = draft_quality_of(run, role_name);
    if (role.rows > 0) report.roles.push_back(std::move(role));
  }
  report.shared_devices = shared_devices(run);
  name_bottleneck(report);
  return report;
}

std::string format_report(const RunReport& report) {
  const std::vector<int>& sizes = report.launch_world_sizes;
  const bool stitched = report.launches.size() > 1;
  const bool same_ranks = sizes.empty() || std::equal(sizes.begin() + 1, sizes.end(), sizes.begin());
  std::string out = report.path + ": ";
  if (stitched) {
    std::string numbers, ranks;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      numbers += cat(i ? ", " : "", report.launches[i]);
      ranks += cat(i ? ", then " : "", sizes[i]);
    }
    out += cat("launches ", numbers, " stitched into one run (", same_ranks ? cat(sizes.front()) : ranks, " ranks)");
  } else {
    out += cat(report.world_size, " ranks");
  }
  if (report.skipped_steps > 0)
    out += cat(", first ", report.skipped_steps, " steps of each rank left out", stitched ? " in every launch" : "");
  out += "\n";
  if (!report.repeated.empty()) {
    std::int64_t count = 0;
    std::string which;
    for (const RepeatedSteps& r : report.repeated) {
      count += r.count;
      which += cat(which.empty() ? "" : "; ", "launch ", r.launch, ": ", r.count, " steps, ", r.first, "..", r.last);
    }
    out += cat("repeated: ", count, " steps ran again in a later launch (", which,
               "); the later rows are kept, the earlier ones were work lost\n");
  }
  if (!same_ranks)
    out += "ranks differ between launches: tokens/s and MFU are each launch's over its own ranks, weighted by its time\n";
  char line[256];
  for (const RoleReport& role : report.roles) {
    std::string ranks;
    for (int r : role.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    out += cat("\nrole ", role.role, " (rank", role.ranks.size() > 1 ? "s " : " ", ranks, "): steps ", role.first_step,
               "..", role.last_step, ", ", role.rows, " rank-steps\n");
    std::snprintf(line, sizeof line, "  %-14s %7s %10s %10s %10s\n", "phase", "% step", "mean ms", "p50 ms", "p95 ms");
    out += line;
    auto row = [&](const PhaseStats& p, const char* note) {
      std::snprintf(line, sizeof line, "  %-14s %7.1f %10.3f %10.3f %10.3f%s\n", p.name.c_str(), p.share * 100,
                    p.mean * 1e3, p.p50 * 1e3, p.p95 * 1e3, note);
      out += line;
    };
    const std::string hidden =
        role.comm_hidden >= 0 ? cat("   <- device time; ", percent(role.comm_hidden), " of it under backward") : "";
    for (const PhaseStats& p : role.phases)
      if (p.name == "other")
        row(p, "   <- wall minus what named phases cover (untimed code, idle device)");
      else if (p.total != 0)
        row(p, p.name == phase_name(Phase::comm_wait) ? hidden.c_str() : "");
    if (role.overlap.share >= 0.0005) row(role.overlap, "   <- counted in two phases (device phases at once); not added");
    row(role.wall, "");
    out += cat("  tokens/s ", static_cast<long long>(std::llround(role.tokens_per_second)));
    if (role.ranks.size() > 1) out += cat(" (sum of ", role.ranks.size(), " ranks)");
    if (role.mfu >= 0) {
      std::snprintf(line, sizeof line, "   MFU %.1f%%", role.mfu * 100);
      out += line;
    } else {
      out += "   MFU n/a (no FLOPs per token recorded)";
    }
    std::snprintf(line, sizeof line, "   comm %.1f%% of step%s", role.comm_share * 100,
                  role.comm_hidden >= 0 ? " not under backward" : "");
    out += line;
    if (role.queue_depth_mean >= 0) {
      std::snprintf(line, sizeof line, "   queue depth mean %.1f max %.0f", role.queue_depth_mean, role.queue_depth_max);
      out += line;
    }
    out += "\n";
    if (const RoleReport::DraftQuality& q = role.draft_quality; q.steps > 0) {
      std::snprintf(line, sizeof line, "  draft quality: tau %.2f over the last %zu steps (trivial drafters on the same "
                    "slots: mode %.2f, slot-mode %.2f)", q.tau, q.steps, q.tau_mode, q.tau_slot_mode);
      out += line;
      if (q.eval_step >= 0) {
        std::snprintf(line, sizeof line, "; held-out after step %lld: tau %.2f (mode %.2f, slot-mode %.2f)",
                      static_cast<long long>(q.eval_step), q.eval_tau, q.eval_tau_mode, q.eval_tau_slot_mode);
        out += line;
      }
      out += "; teacher-forced";
      if (q.decoded_step >= 0) {
        std::snprintf(line, sizeof line, "; by speculative decoding of held-out prompts after step %lld: tau %.2f "
                      "(trivial drafter %.2f)", static_cast<long long>(q.decoded_step), q.decoded_tau,
                      q.decoded_trivial_tau);
        out += line;
      }
      out += "\n";
    }
    if (role.p50_no_write > 0) {
      std::snprintf(line, sizeof line,
                    "  beside a checkpoint write: %zu of %zu rank-steps, p50 %.3f ms against %.3f ms without "
                    "(%+.1f%%; wall less the step's own checkpoint phase)\n",
                    role.rows_beside_write, role.rows, role.p50_beside_write * 1e3, role.p50_no_write * 1e3,
                    100 * (role.p50_beside_write / role.p50_no_write - 1));
      out += line;
    }
    if (!role.slowest.empty())
      out += cat("  slowest steps, over the p50 step (", fixed_point(role.wall.p50 * 1e3, 1),
                 " ms) and each phase's p50:\n");
    for (const RoleReport::SlowStep& slow : role.slowest) {
      std::string where;
      if (stitched) where += cat("launch ", slow.launch);
      if (role.ranks.size() > 1) where += cat(where.empty() ? "" : ", ", "rank ", slow.rank);
      std::string over;
      for (std::size_t i = 0; i < slow.excess.size() && i < 3; ++i)
        over += cat(i ? ", " : ": ", slow.excess[i].first, " +", fixed_point(slow.excess[i].second * 1e3, 1), " ms");
      out += cat("    step ", slow.step, where.empty() ? "" : " (" + where + ")", " ", fixed_point(slow.wall * 1e3, 1),
                 " ms, +", fixed_point((slow.wall / role.wall.p50 - 1) * 100, 0), "%", over,
                 slow.beside_write ? "; a checkpoint write in flight" : "", "\n");
    }
  }
  if (!report.shared_devices.empty()) out += "\n" + format_shared_devices(report.shared_devices, stitched);
  out += "\nbottleneck: " + report.bottleneck + "\n";
  const std::string& phase = report.bottleneck_phase;
  if (phase == "forward" || phase == "backward" || phase == "optimizer") {
    out += "to see which kernels and host calls make it slow, rerun with --set log.profile_step=N: every rank\n"
           "writes profile-stepN-rankR.txt into the run directory\n";
  }
  return out;
}

LaunchSummary summarise_launch(const TimingsData& data) {
  LaunchSummary summary;
  summary.launch = data.launch;
  summary.world_size = data.world_size;
  std::vector<std::pair<std::string, int>> counts;  // roles in order of their lowest rank
  for (const std::string& role : data.roles) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == role; });
    if (it == counts.end()) counts.emplace_back(role, 1);
    else ++it->second;
  }
  for (const auto& [role, count] : counts) summary.roles += cat(summary.roles.empty() ? "" : ", ", count, ' ', role);
  const TableData& steps = data.steps;
  if (steps.rows == 0) return summary;
  const StepColumns c(data);
  const std::vector<bool> trains = training_ranks(data);
  double begin = INFINITY, end = -INFINITY;
  summary.first_step = std::numeric_limits<std::int64_t>::max();
  summary.last_step = std::numeric_limits<std::int64_t>::min();
  for (std::size_t row = 0; row < steps.rows; ++row) {
    summary.first_step = std::min(summary.first_step, static_cast<std::int64_t>(steps.at(row, c.step)));
    summary.last_step = std::max(summary.last_step, static_cast<std::int64_t>(steps.at(row, c.step)));
    begin = std::min(begin, steps.at(row, c.start));
    end = std::max(end, steps.at(row, c.start) + steps.at(row, c.wall));
  }
  summary.seconds = end - begin;
  double loss_sum = 0;
  int loss_rows = 0;
  for (std::size_t row = 0; row < steps.rows; ++row) {
    const auto r = static_cast<std::size_t>(steps.at(row, c.rank));
    if (r >= trains.size() || !trains[r]) continue;
    summary.tokens += steps.at(row, c.tokens);
    if (static_cast<std::int64_t>(steps.at(row, c.step)) == summary.last_step && std::isfinite(steps.at(row, c.loss))) {
      loss_sum += steps.at(row, c.loss);
      ++loss_rows;
    }
  }
  if (loss_rows > 0) summary.last_loss = loss_sum / loss_rows;
  return summary;
}

std::string format_launches(const std::vector<LaunchSummary>& launches) {
  std::string out = cat(launches.size(), " launches (a resumed run):\n");
  char line[256];
  std::snprintf(line, sizeof line, "  %-6s %-24s %-15s %10s %14s %10s\n", "launch", "ranks", "steps", "seconds",
                "tokens", "last loss");
  out += line;
  double seconds = 0, tokens = 0;
  for (const LaunchSummary& l : launches) {
    const std::string steps = l.last_step < l.first_step ? "none" : cat(l.first_step, "..", l.last_step);
    const std::string ranks = cat(l.world_size, " (", l.roles, ")");
    std::snprintf(line, sizeof line, "  %-6d %-24s %-15s %10.1f %14.0f %10.4g\n", l.launch, ranks.c_str(),
                  steps.c_str(), l.seconds, l.tokens, l.last_loss);
    out += line;
    seconds += l.seconds;
    tokens += l.tokens;
  }
  std::snprintf(line, sizeof line, "  %-6s %-24s %-15s %10.1f %14.0f\n", "all", "", "", seconds, tokens);
  out += line;
  return out;
}

}  // namespace topotrain
