#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "topotrain/core/files.h"
#include "topotrain/store/chrome_trace.h"
#include "topotrain/store/h5_io.h"
#include "topotrain/store/phase.h"
#include "topotrain/store/phase_chart_svg.h"
#include "topotrain/store/phase_timer.h"
#include "topotrain/store/run_report.h"
#include "topotrain/store/timings_file.h"

using namespace topotrain;

namespace {

constexpr int kSteps = 10;

// Phase seconds of one synthetic row: targets (ranks 0, 1) spend 40% of a 100 ms step
// waiting on the queue; the drafter (rank 2) spends 61 ms in backward and a copy time
// that grows by 1 ms per step, and is the one that records a loss.
std::map<std::string, double> synthetic_row(int rank, int step) {
  if (rank < 2)
    return {{"forward", 0.030}, {"queue_wait", 0.040}, {"send", 0.010}, {"wall", 0.100}, {"tokens", 1000},
            {"flops", 3e10}};
  const double h2d = 0.001 * (step + 1);
  return {{"recv", 0.005},     {"h2d", h2d},          {"forward", 0.020}, {"backward", 0.061},
          {"optimizer", 0.010}, {"wall", 0.100 + h2d}, {"tokens", 500},    {"queue_depth", double(step % 4)},
          {"loss", 5.0 - 0.1 * step}};
}

// Unmeasured metrics are NaN in real logs (StepMetrics::kUnset).
double unset(const std::string& field) { return field == "queue_depth" || field == "loss" ? StepMetrics::kUnset : 0; }

// An empty timings.h5 with the layout of timings_file.h, written directly, independent of
// TimingLog: its attributes and tables, which the writers below fill.
H5Handle create_timings_file(const std::string& path, std::int64_t world_size, const std::string& roles) {
  H5Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose, path);
  write_attribute(file, "format", std::string("topotrain-timings"));
  write_attribute(file, "world_size", world_size);
  write_attribute(file, "roles", roles);
  return file;
}

struct TimingsTables {
  TimingsTables(const std::string& path, std::int64_t world_size, const std::string& roles)
      : file(create_timings_file(path, world_size, roles)),
        ranks(file, "ranks", rank_fields()),
        steps(file, "steps", step_fields({})),
        spans(file, "spans", span_fields()),
        nvml(file, "nvml", nvml_fields()) {
    std::string phases;
    for (const char* name : phase_names()) phases += (phases.empty() ? "" : ",") + std::string(name);
    write_attribute(H5Handle(H5Dopen2(file, "spans", H5P_DEFAULT), H5Dclose, "spans"), "phases", phases);
  }
  H5Handle file;
  H5Table ranks, steps, spans, nvml;
};

// Written with the layout of timings_file.h directly, independent of TimingLog.
// `phantom_rows`: each rank also ends with a row that trained nothing (no tokens, no
// compute; the drafter waited on its queue), as older dflash builds wrote.
std::string write_synthetic(const std::string& dir, bool phantom_rows = false) {
  const std::string path = join_path(dir, kTimingsFileName);
  TimingsTables t(path, 3, "target,target,drafter");
  // Targets record each step's FLOPs, the drafter FLOPs per token.
  t.ranks.append({0, 0, 1e12, -1, 1, 0, 1e12, -1, 2, 6e9, 1e12, -1});
  const auto fields = step_fields({});
  t.nvml.append({2, 0.05, 97, 40, 1e9, 300, 1980});
  std::vector<double> rows, span_rows;
  for (int step = kSteps - 1; step >= 0; --step) {  // out of order, as gathers may deliver them
    for (int rank = 0; rank < 3; ++rank) {
      auto values = synthetic_row(rank, step);
      double named = 0;
      for (const char* p : phase_names()) named += values.count(p) ? values[p] : 0;
      values["step"] = step;
      values["rank"] = rank;
      values["start"] = step * 0.2;
      values["other"] = values["wall"] - named;
      for (const auto& field : fields)
        rows.push_back(values.count(field) ? values[field] : unset(field));
      span_rows.insert(span_rows.end(), {double(rank), double(step), double(int(Phase::forward)), step * 0.2, 0.02, 0});
    }
  }
  if (phantom_rows) {
    for (int rank = 0; rank < 3; ++rank) {
      std::map<std::string, double> values = {{"step", kSteps}, {"rank", double(rank)}, {"start", kSteps * 0.2},
                                              {"wall", 0.004}, {"other", 0.001}};
      if (rank == 2) values["queue_wait"] = 0.003;
      else values["data_wait"] = 0.003;
      for (const auto& field : fields)
        rows.push_back(values.count(field) ? values[field] : unset(field));
    }
  }
  t.steps.append(rows);
  t.spans.append(span_rows);
  return path;
}

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_directory("topotrain-report-");
    data_ = read_timings(write_synthetic(dir_));
  }
  void TearDown() override { remove_tree(dir_); }
  std::string dir_;
  TimingsData data_;
};

}  // namespace

TEST(Percentile, NearestRank) {
  EXPECT_EQ(percentile({5, 1, 4, 2, 3}, 50), 3);
  EXPECT_EQ(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 95), 10);
  EXPECT_EQ(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 50), 5);
  EXPECT_EQ(percentile({}, 50), 0);
}

TEST_F(ReportTest, PhaseSharesAndStatisticsMatchTheKnownTimes) {
  RunReport report = analyse_timings(data_, 0);
  ASSERT_EQ(report.roles.size(), 2u);
  const RoleReport& target = report.roles[0];
  const RoleReport& drafter = report.roles[1];
  EXPECT_EQ(target.role, "target");
  EXPECT_EQ(target.ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(target.rows, 2u * kSteps);
  EXPECT_NEAR(target.phase("queue_wait").share, 0.40, 1e-12);
  EXPECT_NEAR(target.phase("forward").share, 0.30, 1e-12);
  EXPECT_NEAR(target.phase("other").share, 0.20, 1e-12);
  EXPECT_NEAR(target.phase("forward").mean, 0.030, 1e-12);
  EXPECT_NEAR(target.comm_share, 0.10, 1e-12);
  EXPECT_NEAR(target.wait_share, 0.40, 1e-12);
  EXPECT_NEAR(target.tokens_per_second, 2 * 1000 / 0.100, 1e-6);
  EXPECT_NEAR(target.mfu, 3e10 / 0.100 / 1e12, 1e-12);  // from the per-step FLOPs
  EXPECT_LT(target.queue_depth_mean, 0);

  // Drafter: wall = 100 ms + h2d, h2d = 1..10 ms.
  const double wall_total = 10 * 0.100 + 0.055;
  EXPECT_EQ(drafter.ranks, (std::vector<int>{2}));
  EXPECT_NEAR(drafter.phase("backward").share, 10 * 0.061 / wall_total, 1e-12);
  EXPECT_NEAR(drafter.phase("h2d").mean, 0.0055, 1e-12);
  EXPECT_NEAR(drafter.phase("h2d").p50, 0.005, 1e-12);
  EXPECT_NEAR(drafter.phase("h2d").p95, 0.010, 1e-12);
  EXPECT_NEAR(drafter.phase("other").share, 10 * 0.004 / wall_total, 1e-12);
  EXPECT_NEAR(drafter.wall.p95, 0.110, 1e-12);
  EXPECT_NEAR(drafter.comm_share, 10 * 0.005 / wall_total, 1e-12);
  const double drafter_tps = 10 * 500 / wall_total;
  EXPECT_NEAR(drafter.tokens_per_second, drafter_tps, 1e-6);
  EXPECT_NEAR(drafter.mfu, 6e9 * drafter_tps / 1e12, 1e-12);
  EXPECT_NEAR(drafter.queue_depth_mean, 1.3, 1e-12);  // 0,1,2,3,0,1,2,3,0,1
  EXPECT_EQ(drafter.queue_depth_max, 3);

  double shares = drafter.phase("other").share;
  for (const char* p : phase_names()) shares += drafter.phase(p).share;
  EXPECT_NEAR(shares, 1.0, 1e-12);

  EXPECT_EQ(report.bottleneck, "drafter backward is 58% of step; target waits on queue 40%");
  EXPECT_EQ(report.bottleneck_phase, "backward");
  const std::string text = format_report(report);
  EXPECT_NE(text.find("rerun with --set log.profile_step=N"), std::string::npos) << text;
  EXPECT_NE(text.find("bottleneck: drafter backward is 58% of step; target waits on queue 40%"), std::string::npos);
  EXPECT_NE(text.find("queue_wait        40.0"), std::string::npos) << text;
  EXPECT_NE(text.find("MFU "), std::string::npos) << text;
}

TEST_F(ReportTest, SkipLeavesOutEachRanksFirstSteps) {
  RunReport report = analyse_timings(data_, 3);
  const RoleReport& drafter = report.roles[1];
  EXPECT_EQ(drafter.rows, 7u);
  EXPECT_EQ(drafter.first_step, 3);
  EXPECT_NEAR(drafter.phase("h2d").mean, 0.007, 1e-12);  // 4..10 ms
}

TEST_F(ReportTest, RowsThatTrainedNothingAreNotSteps) {
  const std::string dir = make_temp_directory("topotrain-report-phantom-");
  const RunReport with = analyse_timings(read_timings(write_synthetic(dir, true)), 0);
  const RunReport without = analyse_timings(data_, 0);
  remove_tree(dir);
  ASSERT_EQ(with.roles.size(), 2u);
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(with.roles[r].first_step, 0);
    EXPECT_EQ(with.roles[r].last_step, kSteps - 1) << with.roles[r].role;
    EXPECT_EQ(with.roles[r].rows, without.roles[r].rows);
    EXPECT_NEAR(with.roles[r].wall.mean, without.roles[r].wall.mean, 1e-12);
    EXPECT_NEAR(with.roles[r].wait_share, without.roles[r].wait_share, 1e-12);
  }
  EXPECT_NE(format_report(with).find("role drafter (rank 2): steps 0..9, 10 rank-steps"), std::string::npos);
}

TEST_F(ReportTest, TraceHasALanePerRankAndEverySpan) {
  const auto trace = nlohmann::json::parse(chrome_trace_json(data_));
  std::set<std::string> lanes;
  int steps = 0, forward = 0, counters = 0;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "thread_name") lanes.insert(event["args"]["name"].get<std::string>());
    if (event["ph"] == "X" && event["cat"] == "step") ++steps;
    if (event["ph"] == "X" && event["name"] == "forward") {
      ++forward;
      EXPECT_DOUBLE_EQ(event["dur"].get<double>(), 20000.0);  // microseconds
    }
    if (event["ph"] == "C") ++counters;
  }
  EXPECT_TRUE(lanes.count("rank 0 target") && lanes.count("rank 1 target") && lanes.count("rank 2 drafter"));
  EXPECT_EQ(steps, 3 * kSteps);
  EXPECT_EQ(forward, 3 * kSteps);
  EXPECT_EQ(counters, 1);
}

TEST_F(ReportTest, ChartHasAPanelPerRoleAndALegend) {
  const std::string svg = phase_chart_svg(data_, 0);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("Role target (2 ranks)"), std::string::npos);
  EXPECT_NE(svg.find("Role drafter (1 rank)"), std::string::npos);
  EXPECT_NE(svg.find(">backward</text>"), std::string::npos);
  EXPECT_NE(svg.find(">queue_wait</text>"), std::string::npos);
  EXPECT_NE(svg.find("ms per step"), std::string::npos);
  // 10 steps, one bar each: targets stack forward, queue_wait, send, other.
  std::size_t rects = 0;
  for (std::size_t at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1)) ++rects;
  const std::size_t background = 1, legend = 4 + 6, target_bars = 10 * 4, drafter_bars = 10 * 6;
  EXPECT_EQ(rects, background + legend + target_bars + drafter_bars);
}

// A launch's summary counts the tokens of the ranks that train (a loss recorded) once, and
// its loss is the training ranks' at the last step.
TEST_F(ReportTest, LaunchSummaryCountsTrainingRanks) {
  const LaunchSummary summary = summarise_launch(data_);
  EXPECT_EQ(summary.launch, 1);  // written without a launch number
  EXPECT_EQ(summary.roles, "2 target, 1 drafter");
  EXPECT_EQ(summary.first_step, 0);
  EXPECT_EQ(summary.last_step, kSteps - 1);
  EXPECT_DOUBLE_EQ(summary.tokens, 500.0 * kSteps);
  EXPECT_DOUBLE_EQ(summary.last_loss, 5.0 - 0.1 * (kSteps - 1));
  // Step 0 starts at 0; the last step starts at 0.2 (kSteps - 1) and the drafter's lasts longest.
  EXPECT_NEAR(summary.seconds, 0.2 * (kSteps - 1) + 0.100 + 0.001 * kSteps, 1e-12);
  const std::string text = format_launches({summary, summary});
  EXPECT_NE(text.find("2 launches"), std::string::npos) << text;
  EXPECT_NE(text.find("3 (2 target, 1 drafter)"), std::string::npos) << text;
  EXPECT_NE(text.find("0..9"), std::string::npos) << text;
  EXPECT_NE(text.find(" 10000"), std::string::npos) << text;  // the total of both
}

namespace {

// One trainer whose phases are device time (a CUDA build): of a 100 ms step, forward 30,
// backward 50, an all-reduce of 20 that ran 15 under backward, optimizer 5; so the named
// phases (105) cover 90 ms and 10 ms is untimed. `device_spans`: the spans say backward
// and comm_wait were timed on streams (else backward reads as host time, and nothing says
// how much of the all-reduce it hid).
std::string write_overlapping(const std::string& dir, bool device_spans) {
  const std::string path = join_path(dir, kTimingsFileName);
  TimingsTables t(path, 1, "trainer");
  t.ranks.append({0, 0, 0, 0});
  const auto fields = step_fields({});
  std::vector<double> rows, span_rows;
  for (int step = 0; step < kSteps; ++step) {
    std::map<std::string, double> values = {
        {"step", step},        {"rank", 0},          {"start", 0.1 * step},  {"wall", 0.100},
        {"forward", 0.030},    {"backward", 0.050},  {"comm_wait", 0.020},   {"optimizer", 0.005},
        {"overlap", 0.015},    {"comm_overlap", 0.015}, {"other", 0.010},   {"tokens", 1000}};
    for (const auto& field : fields) rows.push_back(values.count(field) ? values[field] : unset(field));
    span_rows.insert(span_rows.end(),
                     {0, double(step), double(int(Phase::backward)), 0.1 * step + 0.03, 0.05, device_spans ? 1.0 : 0.0});
    span_rows.insert(span_rows.end(), {0, double(step), double(int(Phase::comm_wait)), 0.1 * step + 0.065, 0.02, 1});
  }
  t.steps.append(rows);
  t.spans.append(span_rows);
  return path;
}

}  // namespace

TEST(ReportOverlap, CommUnderBackwardIsReportedAsHiddenNotAsShare) {
  const std::string dir = make_temp_directory("topotrain-report-overlap-");
  const RunReport report = analyse_timings(read_timings(write_overlapping(dir, true)), 0);
  ASSERT_EQ(report.roles.size(), 1u);
  const RoleReport& role = report.roles[0];
  // The shares of the phases add up to more than the step; less the overlap, with other, to all of it.
  double shares = role.phase("other").share;
  for (const char* name : phase_names()) shares += role.phase(name).share;
  EXPECT_NEAR(shares - role.overlap.share, 1.0, 1e-12);
  EXPECT_NEAR(role.phase("other").share, 0.10, 1e-12);
  EXPECT_NEAR(role.phase("comm_wait").share, 0.20, 1e-12);
  EXPECT_NEAR(role.comm_overlap.mean, 0.015, 1e-12);
  EXPECT_NEAR(role.comm_hidden, 0.75, 1e-12);
  EXPECT_NEAR(role.comm_share, 0.05, 1e-12);  // what backward did not hide
  EXPECT_NEAR(role.wait_share, 0.05, 1e-12);
  EXPECT_EQ(report.bottleneck, "trainer backward is 50% of step");
  const std::string text = format_report(report);
  EXPECT_NE(text.find("75% of it under backward"), std::string::npos) << text;
  EXPECT_NE(text.find("comm 5.0% of step not under backward"), std::string::npos) << text;
  EXPECT_NE(text.find("overlap"), std::string::npos) << text;

  // backward timed on the host: no share under backward is claimed.
  const RunReport host = analyse_timings(read_timings(write_overlapping(dir, false)), 0);
  EXPECT_EQ(host.roles[0].comm_hidden, -1);
  EXPECT_EQ(format_report(host).find("under backward"), std::string::npos);
  remove_tree(dir);
}
