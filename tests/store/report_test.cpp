#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../command_output.h"
#include "../readme_listing.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/store/chrome_trace.h"
#include "topotrain/store/h5_io.h"
#include "topotrain/store/phase.h"
#include "topotrain/store/phase_timer.h"
#include "topotrain/store/run_chart_svg.h"
#include "topotrain/store/run_comparison.h"
#include "topotrain/store/run_report.h"
#include "topotrain/store/step_curves_svg.h"
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
double unset(const std::string& field) {
  return field == "queue_depth" || field == "loss" || field == "checkpoint_writing" ? StepMetrics::kUnset : 0;
}

// Appends one /steps row of `values`, every other field unset.
void append_step_row(std::vector<double>& rows, const std::map<std::string, double>& values) {
  for (const std::string& field : step_fields({})) rows.push_back(values.count(field) ? values.at(field) : unset(field));
}

// A launch's attributes in the layout of timings_file.h, written directly, independent of
// TimingLog, at `location`: a file's root or a group under /launches.
void write_launch_attributes(hid_t location, std::int64_t world_size, const std::string& roles, std::int64_t launch) {
  write_attribute(location, "format", std::string("topotrain-timings"));
  write_attribute(location, "world_size", world_size);
  write_attribute(location, "roles", roles);
  if (launch > 0) write_attribute(location, "launch", launch);
}

// An empty timings.h5 with the layout of timings_file.h: its attributes and tables, which
// the writers below fill (`launch` 0: a file of before launches were numbered).
H5Handle create_timings_file(const std::string& path, std::int64_t world_size, const std::string& roles,
                             std::int64_t launch = 0) {
  H5Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose, path);
  write_launch_attributes(file, world_size, roles, launch);
  return file;
}

// An earlier launch of a resumed run: the group /launches/<launch> of `file`.
H5Handle create_earlier_launch(hid_t file, std::int64_t world_size, const std::string& roles, std::int64_t launch) {
  if (!link_exists(file, kTimingsLaunchesGroup))
    H5Handle(H5Gcreate2(file, kTimingsLaunchesGroup, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose, "launches");
  const std::string name = std::string(kTimingsLaunchesGroup) + "/" + std::to_string(launch);
  H5Handle group(H5Gcreate2(file, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose, name);
  write_launch_attributes(group, world_size, roles, launch);
  return group;
}

struct TimingsTables {
  explicit TimingsTables(H5Handle at)
      : location(std::move(at)),
        ranks(location, "ranks", rank_fields()),
        steps(location, "steps", step_fields({})),
        spans(location, "spans", span_fields()),
        nvml(location, "nvml", nvml_fields()) {
    std::string phases;
    for (const char* name : phase_names()) phases += (phases.empty() ? "" : ",") + std::string(name);
    write_attribute(H5Handle(H5Dopen2(location, "spans", H5P_DEFAULT), H5Dclose, "spans"), "phases", phases);
  }
  H5Handle location;
  H5Table ranks, steps, spans, nvml;
};

// Written with the layout of timings_file.h directly, independent of TimingLog.
// `phantom_rows`: each rank also ends with a row that trained nothing (no tokens, no
// compute; the drafter waited on its queue), as older dflash builds wrote.
std::string write_synthetic(const std::string& dir, bool phantom_rows = false) {
  const std::string path = join_path(dir, kTimingsFileName);
  TimingsTables t(create_timings_file(path, 3, "target,target,drafter"));
  // Targets record each step's FLOPs, the drafter FLOPs per token.
  t.ranks.append({0, 0, 1e12, -1, -1, 1, 0, 1e12, -1, -1, 2, 6e9, 1e12, -1, -1});
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
      append_step_row(rows, values);
      span_rows.insert(span_rows.end(), {double(rank), double(step), double(int(Phase::forward)), step * 0.2, 0.02, 0});
    }
  }
  if (phantom_rows) {
    for (int rank = 0; rank < 3; ++rank) {
      std::map<std::string, double> values = {{"step", kSteps}, {"rank", double(rank)}, {"start", kSteps * 0.2},
                                              {"wall", 0.004}, {"other", 0.001}};
      if (rank == 2) values["queue_wait"] = 0.003;
      else values["data_wait"] = 0.003;
      append_step_row(rows, values);
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
  RunReport report = analyse_timings(stitch_launches({data_}, 0));
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
  EXPECT_EQ(text.find("beside a checkpoint write"), std::string::npos) << text;  // not recorded here
}

namespace {
// The comma-separated columns docs/store.md lists in the table row that starts with `row`.
std::set<std::string> documented_columns(const std::string& row) {
  std::set<std::string> documented;
  for (const std::string& listed : test_support::doc_listing("docs/store.md", row)) {
    for (std::size_t at = 0; at <= listed.size();) {
      const std::size_t end = std::min(listed.find(", ", at), listed.size());
      documented.insert(listed.substr(at, end - at));
      at = end + 2;
    }
  }
  return documented;
}
}  // namespace

TEST(TimingsLayout, DocumentedStepColumnsAreTheCodes) {
  std::set<std::string> code;  // the phases, which the doc names as a group, left out
  for (const std::string& field : step_fields({}))
    if (std::find(phase_names().begin(), phase_names().end(), field) == phase_names().end()) code.insert(field);
  EXPECT_EQ(documented_columns("| `/steps` |"), code);
  const std::vector<std::string> ranks = rank_fields();
  EXPECT_EQ(documented_columns("| `/ranks` |"), std::set<std::string>(ranks.begin(), ranks.end()));
}

TEST(ReportCheckpointWrites, StepsBesideAWriteAreSetAgainstTheOthers) {
  const std::string dir = make_temp_directory("topotrain-report-writes-");
  const std::string path = join_path(dir, kTimingsFileName);
  {
    TimingsTables t(create_timings_file(path, 1, "trainer"));
    t.ranks.append({0, 0, 0, -1, -1});
    // Steps 3..6 end beside a write and take 120 ms, the others 100 ms outside their own
    // checkpoint phase (step 2 saves: 400 ms more of it, and counts as 100); step 9's flag is
    // unknown (NaN) and its 500 ms must count in neither group.
    std::vector<double> rows;
    for (int step = 0; step < 10; ++step) {
      const bool beside = step >= 3 && step <= 6;
      const double checkpoint = step == 2 ? 0.400 : 0;
      const double wall = (step == 9 ? 0.5 : beside ? 0.120 : 0.100) + checkpoint;
      std::map<std::string, double> values = {{"step", step},   {"rank", 0},         {"start", step * 0.2},
                                              {"wall", wall},   {"forward", 0.050},  {"checkpoint", checkpoint},
                                              {"tokens", 100},  {"other", wall - 0.050 - checkpoint}};
      if (step != 9) values["checkpoint_writing"] = beside ? 1 : 0;
      append_step_row(rows, values);
    }
    t.steps.append(rows);
  }
  const RunReport report = analyse_timings(stitch_launches({read_timings(path)}, 0));
  ASSERT_EQ(report.roles.size(), 1u);
  const RoleReport& role = report.roles[0];
  EXPECT_EQ(role.rows_beside_write, 4u);
  EXPECT_NEAR(role.p50_beside_write, 0.120, 1e-12);
  EXPECT_NEAR(role.p50_no_write, 0.100, 1e-12);
  const std::string text = format_report(report);
  EXPECT_NE(text.find("beside a checkpoint write: 4 of 10 rank-steps, p50 120.000 ms against 100.000 ms without "
                      "(+20.0%; wall less the step's own checkpoint phase)"),
            std::string::npos)
      << text;

  // Leaving out the first 7 steps leaves rows beside no write (7, 8) and one unknown (9):
  // nothing to set against, no line.
  const RunReport late = analyse_timings(stitch_launches({read_timings(path)}, 7));
  EXPECT_EQ(late.roles[0].rows_beside_write, 0u);
  EXPECT_LT(late.roles[0].p50_no_write, 0);
  EXPECT_EQ(format_report(late).find("beside a checkpoint write"), std::string::npos);
  remove_tree(dir);
}

// The phases of one synthetic step of one rank, in seconds ("wall" is their sum).
using StepPhases = std::map<std::string, double>;

// A timings.h5 of one trainer role on two ranks, steps 1..20 of 100 ms (forward 60, backward 30,
// other 10), each as `adjust` changes it.
std::string write_two_rank_run(const std::string& dir, const std::function<void(int, int, StepPhases&)>& adjust) {
  make_directories(dir);
  const std::string path = join_path(dir, kTimingsFileName);
  TimingsTables t(create_timings_file(path, 2, "trainer,trainer"));
  t.ranks.append({0, 0, 0, -1, -1, 1, 0, 0, -1, -1});
  std::vector<double> rows;
  for (int step = 1; step <= 20; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      StepPhases values = {{"forward", 0.060}, {"backward", 0.030}, {"other", 0.010}};
      adjust(step, rank, values);
      double wall = 0;
      for (const auto& [name, seconds] : values) wall += name == "checkpoint_writing" ? 0 : seconds;
      values.insert({{"step", step}, {"rank", rank}, {"start", step * 0.2}, {"wall", wall}, {"tokens", 100}});
      append_step_row(rows, values);
    }
  }
  t.steps.append(rows);
  return path;
}

// Step 7 runs over in forward, by 50 ms on rank 1 and 20 on rank 0, which then waits 30 ms for
// rank 1 in comm_wait: both take 150 ms, and rank 1 is the one to tell it from. Step 12 on rank 0
// waits 40 ms on a checkpoint and 5 more untimed, beside a write; step 15 takes 104 ms, within
// the margin.
void slow_steps(int step, int rank, StepPhases& values) {
  if (step == 7) values["forward"] += rank == 1 ? 0.050 : 0.020, values["comm_wait"] = rank == 1 ? 0 : 0.030;
  if (step == 12 && rank == 0) values["checkpoint"] = 0.040, values["other"] += 0.005;
  if (step == 15) values["other"] += 0.004;
  values["checkpoint_writing"] = step == 12 ? 1 : 0;
}

TEST(ReportSlowestSteps, EachSlowStepOnceAtTheRankThatWaitedLeastWithThePhasesThatRanOver) {
  const std::string dir = make_temp_directory("topotrain-report-slowest-");
  const StitchedRun run = stitch_launches({read_timings(write_two_rank_run(dir, slow_steps))}, 0);
  const RoleReport role = analyse_timings(run).roles.at(0);
  ASSERT_EQ(role.slowest.size(), 2u);
  EXPECT_EQ(role.slowest[0].step, 7);
  EXPECT_EQ(role.slowest[0].rank, 1);
  EXPECT_NEAR(role.slowest[0].wall, 0.150, 1e-12);
  ASSERT_EQ(role.slowest[0].excess.size(), 1u);
  EXPECT_EQ(role.slowest[0].excess[0].first, "forward");
  EXPECT_NEAR(role.slowest[0].excess[0].second, 0.050, 1e-12);
  const std::string text = format_report(analyse_timings(run));
  EXPECT_NE(text.find("  slowest steps, over the p50 step (100.0 ms) and each phase's p50:\n"
                      "    step 7 (rank 1) 150.0 ms, +50%: forward +50.0 ms\n"
                      "    step 12 (rank 0) 145.0 ms, +45%: checkpoint +40.0 ms, other +5.0 ms; a checkpoint write "
                      "in flight\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(analyse_timings(run, 1).roles.at(0).slowest.size(), 1u);
  EXPECT_EQ(format_report(analyse_timings(run, 0)).find("slowest steps"), std::string::npos);
  remove_tree(dir);
}

// The run above against one whose every step takes 100 ms: 2.099 s of 20 common steps against
// 2.000 (step 7 +50 ms, step 12 +45 ms, step 15 +4 ms), by phase and by step, each step told from
// the rank that waited least, in both runs; step 15's 4 ms is 4% of a step and listed, the
// others' 0 ms are not.
TEST(ReportComparison, StepByStepAgainstAnotherRunWithThePhasesThatDiffer) {
  const std::string dir = make_temp_directory("topotrain-report-compare-");
  const StitchedRun slow = stitch_launches({read_timings(write_two_rank_run(dir + "/slow", slow_steps))}, 0);
  const auto unchanged = [](int, int, StepPhases&) {};
  const StitchedRun plain = stitch_launches({read_timings(write_two_rank_run(dir + "/plain", unchanged))}, 0);
  const std::vector<RoleComparison> roles = compare_runs(slow, plain, 3);
  ASSERT_EQ(roles.size(), 1u);
  const RoleComparison& role = roles[0];
  EXPECT_EQ(role.steps, 20u);
  EXPECT_NEAR(role.wall, 2.099, 1e-9);
  EXPECT_NEAR(role.other_wall, 2.000, 1e-9);
  ASSERT_EQ(role.most_different.size(), 3u);
  EXPECT_EQ(role.most_different[0].step, 7);
  EXPECT_EQ(role.most_different[1].step, 12);
  EXPECT_EQ(role.most_different[2].step, 15);
  const std::string text = format_comparison(roles, "plain");
  EXPECT_NEAR((role.wall / role.other_wall - 1) * 100, 4.95, 1e-9);
  EXPECT_NE(text.find("role trainer: 20 steps in both (1..20), 2.099 s against 2.000 s (+"), std::string::npos) << text;
  EXPECT_NE(text.find("%)\n"
                      "  by phase: forward +50.0 ms, checkpoint +40.0 ms, other +9.0 ms\n"
                      "  steps that differ most:\n"
                      "    step 7 150.0 ms against 100.0 ms (+50.0 ms): forward +50.0 ms\n"
                      "    step 12 145.0 ms against 100.0 ms (+45.0 ms): checkpoint +40.0 ms, other +5.0 ms\n"
                      "    step 15 104.0 ms against 100.0 ms (+4.0 ms): other +4.0 ms\n"),
            std::string::npos)
      << text;
  // Reversed, the differences change sign; a run of no common step compares nothing.
  EXPECT_NE(format_comparison(compare_runs(plain, slow, 1), "slow").find("(-50.0 ms): forward -50.0 ms"),
            std::string::npos);
  const StitchedRun none = stitch_launches({read_timings(write_two_rank_run(dir + "/none", unchanged))}, 20);
  EXPECT_TRUE(compare_runs(slow, none, 3).empty());
  remove_tree(dir);
}

TEST_F(ReportTest, SkipLeavesOutEachRanksFirstSteps) {
  RunReport report = analyse_timings(stitch_launches({data_}, 3));
  const RoleReport& drafter = report.roles[1];
  EXPECT_EQ(drafter.rows, 7u);
  EXPECT_EQ(drafter.first_step, 3);
  EXPECT_NEAR(drafter.phase("h2d").mean, 0.007, 1e-12);  // 4..10 ms
}

TEST_F(ReportTest, RowsThatTrainedNothingAreNotSteps) {
  const std::string dir = make_temp_directory("topotrain-report-phantom-");
  const RunReport with = analyse_timings(stitch_launches({read_timings(write_synthetic(dir, true))}, 0));
  const RunReport without = analyse_timings(stitch_launches({data_}, 0));
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

// Names are JSON-escaped whatever they hold (quotes, control characters, bytes that are not
// UTF-8), and a value that is not finite is null: the trace always parses.
TEST_F(ReportTest, TraceIsValidJsonWhateverTheNamesHold) {
  TimingsData data = data_;
  data.roles[0] = "tar\"get\n\xff";
  data.span_phases[0] = "for\tward";
  const auto trace = nlohmann::json::parse(chrome_trace_json(data));
  std::set<std::string> lanes;
  for (const auto& event : trace["traceEvents"])
    if (event["ph"] == "M" && event["name"] == "thread_name") lanes.insert(event["args"]["name"].get<std::string>());
  EXPECT_TRUE(lanes.count("rank 0 tar\"get\n\xEF\xBF\xBD")) << *lanes.begin();
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
}

TEST_F(ReportTest, ChartHasAPanelPerRoleAndALegend) {
  const std::string svg = run_chart_svg(stitch_launches({data_}, 0));
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
  TimingsTables t(create_timings_file(path, 1, "trainer"));
  t.ranks.append({0, 0, 0, 0, -1});
  std::vector<double> rows, span_rows;
  for (int step = 0; step < kSteps; ++step) {
    std::map<std::string, double> values = {
        {"step", step},        {"rank", 0},          {"start", 0.1 * step},  {"wall", 0.100},
        {"forward", 0.030},    {"backward", 0.050},  {"comm_wait", 0.020},   {"optimizer", 0.005},
        {"overlap", 0.015},    {"comm_overlap", 0.015}, {"other", 0.010},   {"tokens", 1000}};
    append_step_row(rows, values);
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
  const RunReport report = analyse_timings(stitch_launches({read_timings(write_overlapping(dir, true))}, 0));
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
  const RunReport host = analyse_timings(stitch_launches({read_timings(write_overlapping(dir, false))}, 0));
  EXPECT_EQ(host.roles[0].comm_hidden, -1);
  EXPECT_EQ(format_report(host).find("under backward"), std::string::npos);
  remove_tree(dir);
}

namespace {

// One launch of a resumed trainer run: `ranks` ranks record steps first..last, each row
// `wall` seconds of which 40% forward, 50% backward, 10% untimed, with `tokens` tokens
// and loss `loss_base` - step + 0.5 rank.
struct SyntheticLaunch {
  int launch, ranks;
  std::int64_t first, last;
  double wall, tokens, loss_base;
};
const SyntheticLaunch kFirst{1, 2, 1, 6, 0.100, 100, 10};
const SyntheticLaunch kResumed{2, 1, 4, 9, 0.200, 300, 20};  // died after the step-3 checkpoint
constexpr double kFlopsPerToken = 1e6, kPeak = 1e12;

double loss_of(const SyntheticLaunch& l, std::int64_t step, int rank) {
  return l.loss_base - static_cast<double>(step) + 0.5 * rank;
}

void write_launch(TimingsTables& t, const SyntheticLaunch& l) {
  std::vector<double> ranks, rows;
  for (int rank = 0; rank < l.ranks; ++rank) ranks.insert(ranks.end(), {double(rank), kFlopsPerToken, kPeak, -1, -1});
  for (std::int64_t step = l.last; step >= l.first; --step)  // out of order, as gathers may deliver them
    for (int rank = 0; rank < l.ranks; ++rank)
      append_step_row(rows, {{"step", double(step)}, {"rank", double(rank)}, {"start", double(step - l.first) * l.wall},
                             {"wall", l.wall}, {"forward", 0.4 * l.wall}, {"backward", 0.5 * l.wall},
                             {"other", 0.1 * l.wall}, {"tokens", l.tokens}, {"loss", loss_of(l, step, rank)}});
  t.ranks.append(ranks);
  t.steps.append(rows);
}

// A run's timings.h5 whose root is kResumed and /launches/1 kFirst.
std::string write_resumed(const std::string& dir) {
  const std::string path = join_path(dir, kTimingsFileName);
  TimingsTables newest(create_timings_file(path, kResumed.ranks, "trainer", kResumed.launch));
  TimingsTables earlier(create_earlier_launch(newest.location, kFirst.ranks, "trainer,trainer", kFirst.launch));
  write_launch(newest, kResumed);
  write_launch(earlier, kFirst);
  return path;
}

// What the stitched report must hold, worked out from the launches' definitions: a step of
// kFirst that kResumed also ran is kResumed's, and each launch leaves out its first `skip`.
struct Expected {
  std::size_t rows = 0;
  std::int64_t first_step = 0;
  double tokens = 0, forward = 0, wall = 0, tokens_per_second = 0, mfu = 0;
};
Expected expected_stitch(std::int64_t skip) {
  Expected e;
  e.first_step = kFirst.first + skip;
  double rate_time = 0, weighted_rate = 0, weighted_mfu = 0;
  for (const SyntheticLaunch* l : {&kFirst, &kResumed}) {
    std::int64_t steps = 0;
    for (std::int64_t step = l->first + skip; step <= l->last; ++step)
      if (l == &kResumed || step < kResumed.first) ++steps;
    e.rows += static_cast<std::size_t>(steps * l->ranks);
    e.tokens += static_cast<double>(steps * l->ranks) * l->tokens;
    e.forward += static_cast<double>(steps * l->ranks) * 0.4 * l->wall;
    e.wall += static_cast<double>(steps * l->ranks) * l->wall;
    // Per launch: tokens/s summed over its ranks, weighted by its time.
    const double rate = l->ranks * l->tokens / l->wall, time = static_cast<double>(steps) * l->wall;
    weighted_rate += rate * time;
    weighted_mfu += kFlopsPerToken * (l->tokens / l->wall) / kPeak * time;
    rate_time += time;
  }
  e.tokens_per_second = weighted_rate / rate_time;
  e.mfu = weighted_mfu / rate_time;
  return e;
}

class ResumedReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_directory("topotrain-report-resumed-");
    path_ = write_resumed(dir_);
    launches_ = read_timing_launches(path_);
  }
  void TearDown() override { remove_tree(dir_); }
  std::string report(const std::string& arguments, int status = 0) const {
    return test_support::command_output(cat(TOPOTRAIN_REPORT_BINARY, ' ', dir_, ' ', arguments), status);
  }
  std::string dir_, path_;
  std::vector<TimingsData> launches_;
};

// The attribute `points` of the polyline of class `css_class`, as (x, y) pairs.
std::vector<std::pair<double, double>> polyline(const std::string& svg, const std::string& css_class) {
  const std::size_t at = svg.find("<polyline class=\"" + css_class + "\"");
  if (at == std::string::npos) return {};
  const std::size_t from = svg.find("points=\"", at) + 8;
  std::istringstream points(svg.substr(from, svg.find('"', from) - from));
  std::vector<std::pair<double, double>> out;
  double x = 0, y = 0;
  char comma = 0;
  while (points >> x >> comma >> y) out.emplace_back(x, y);
  return out;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_F(ResumedReportTest, EveryLaunchIsOneRunAndTheLaterLaunchWinsRepeatedSteps) {
  ASSERT_EQ(launches_.size(), 2u);
  for (std::int64_t skip : {0, 1}) {
    SCOPED_TRACE(skip);
    const StitchedRun run = stitch_launches(launches_, skip);
    const Expected e = expected_stitch(skip);
    EXPECT_EQ(run.rows.size(), e.rows);
    double tokens = 0;
    for (const StitchedRow& row : run.rows) tokens += run.value(row, &StepColumns::tokens);
    EXPECT_DOUBLE_EQ(tokens, e.tokens);
    ASSERT_EQ(run.repeated.size(), 1u);  // the resume trained steps 4..6 again
    EXPECT_EQ(run.repeated[0].launch, 1);
    EXPECT_EQ(run.repeated[0].count, 3);
    EXPECT_EQ(run.repeated[0].first, 4);
    EXPECT_EQ(run.repeated[0].last, 6);
    EXPECT_EQ(run.repeated_steps(), 3);

    const RunReport report = analyse_timings(run);
    ASSERT_EQ(report.roles.size(), 1u);
    const RoleReport& trainer = report.roles[0];
    EXPECT_EQ(trainer.ranks, (std::vector<int>{0, 1}));
    EXPECT_EQ(trainer.rows, e.rows);
    EXPECT_EQ(trainer.first_step, e.first_step);
    EXPECT_EQ(trainer.last_step, kResumed.last);
    EXPECT_NEAR(trainer.phase("forward").total, e.forward, 1e-12);
    EXPECT_NEAR(trainer.wall.total, e.wall, 1e-12);
    EXPECT_NEAR(trainer.tokens_per_second, e.tokens_per_second, 1e-9);
    EXPECT_NEAR(trainer.mfu, e.mfu, 1e-15);
    const std::string text = format_report(report);
    EXPECT_NE(text.find("launches 1, 2 stitched into one run (2, then 1 ranks)"), std::string::npos) << text;
    EXPECT_NE(text.find("repeated: 3 steps ran again in a later launch (launch 1: 3 steps, 4..6)"), std::string::npos)
        << text;
    EXPECT_NE(text.find("ranks differ between launches"), std::string::npos) << text;
    EXPECT_NE(text.find(cat("role trainer (ranks 0,1): steps ", e.first_step, "..9, ", e.rows, " rank-steps")),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("left out in every launch") != std::string::npos, skip > 0) << text;
  }
}

TEST_F(ResumedReportTest, OneLaunchIsThatLaunchAlone) {
  const RunReport first = analyse_timings(stitch_launches({launches_[0]}, 0));
  EXPECT_EQ(first.roles[0].rows, 12u);
  EXPECT_EQ(first.roles[0].last_step, 6);
  EXPECT_TRUE(first.repeated.empty());
  EXPECT_NEAR(first.roles[0].tokens_per_second, 2 * kFirst.tokens / kFirst.wall, 1e-9);
  EXPECT_EQ(format_report(first).find("stitched"), std::string::npos);

  const std::string all = report("");
  EXPECT_NE(all.find("launches 1, 2 stitched into one run"), std::string::npos) << all;
  EXPECT_NE(all.find("role trainer (ranks 0,1): steps 1..9, 12 rank-steps"), std::string::npos) << all;
  const std::string one = report("--launch 1");
  EXPECT_NE(one.find("2 launches (a resumed run)"), std::string::npos) << one;
  EXPECT_NE(one.find("launch 1:"), std::string::npos) << one;
  EXPECT_NE(one.find("role trainer (ranks 0,1): steps 1..6, 12 rank-steps"), std::string::npos) << one;
  const std::string last = report("--launch last");
  EXPECT_NE(last.find("launch 2:"), std::string::npos) << last;
  EXPECT_NE(last.find("role trainer (rank 0): steps 4..9, 6 rank-steps"), std::string::npos) << last;
  EXPECT_NE(report("--launch 3", 2).find("holds no launch 3 (it holds 1, 2;"), std::string::npos);
  EXPECT_NE(report("--launch newest", 2).find("--launch newest: expected all, last or a launch number"),
            std::string::npos);
}

// Bad arguments exit 2, as the trainers' do; a range error says the rule, not CLI11's range
// with a 310-digit open end.
TEST_F(ResumedReportTest, BadArgumentsExitTwoAndSayTheRule) {
  const std::string negative = report("--skip -1", 2);
  EXPECT_NE(negative.find("--skip: must be >= 0 (got -1)"), std::string::npos) << negative;
  EXPECT_EQ(negative.find("179769"), std::string::npos) << negative;
  // Steps 1..9: each rank of launch 1 ran 6 (1..6), launch 2's one rank 6 (4..9). Skipping 6
  // of every launch leaves none; 5 leaves each rank its last, of which launch 1's step 6 was
  // run again by launch 2: step 9 alone.
  const std::string all = report("--skip 6", 2);
  EXPECT_NE(all.find("topotrain-report: error: --skip 6 leaves out all 9 recorded steps of " + path_),
            std::string::npos) << all;
  EXPECT_NE(report("--skip 5").find("role trainer (ranks 0,1): steps 9..9, 1 rank-steps"), std::string::npos)
      << report("--skip 5");
  EXPECT_NE(report("--skip 1000 --launch 1", 2).find("leaves out all 6 recorded steps"), std::string::npos);
}

TEST_F(ResumedReportTest, PlotDrawsLossAndTokensPerSecondOfEveryStitchedStep) {
  const std::string plot = join_path(dir_, "steps.svg");
  report("--plot " + plot);
  std::ifstream in(plot);
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t steps = kResumed.last - kFirst.first + 1;  // 1..9, once each
  const auto loss = polyline(svg, "loss"), rate = polyline(svg, "tokens-per-second");
  ASSERT_EQ(loss.size(), steps) << svg;
  ASSERT_EQ(rate.size(), steps);
  for (std::size_t i = 1; i < steps; ++i) EXPECT_GT(loss[i].first, loss[i - 1].first);
  // Steps 1..3 are the first launch's (losses 9.25, 8.25, 7.25, 2000 tokens/s); 4..9 the
  // resumed one's (16 down to 11, 1500 tokens/s): y grows downwards.
  EXPECT_GT(loss[2].second, loss[1].second);
  EXPECT_LT(loss[3].second, loss[2].second);
  EXPECT_GT(loss[8].second, loss[3].second);
  EXPECT_DOUBLE_EQ(rate[0].second, rate[2].second);
  EXPECT_DOUBLE_EQ(rate[3].second, rate[8].second);
  EXPECT_GT(rate[3].second, rate[2].second);
  EXPECT_NE(svg.find("Role trainer (2, then 1 ranks)"), std::string::npos);
  // One boundary in each panel: loss, tokens/s, the trainer's phases.
  EXPECT_EQ(count_of(svg, "class=\"launch-boundary\""), 3u) << svg;
  EXPECT_EQ(count_of(svg, ">launch 2</text>"), 3u);
  // Well-formed XML, by a real parser.
  const std::string parsed = test_support::command_output(
      "/usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E; "
      "print(len(E.parse(sys.argv[1]).getroot().findall(\"{http://www.w3.org/2000/svg}polyline\")))' " + plot);
  EXPECT_EQ(parsed, "2\n");
}

// A long run's curves are binned: each point the mean of its steps, at their mean step.
TEST_F(ResumedReportTest, CurvesOfLongRunsAreBinned) {
  const std::string svg = step_curves_svg(stitch_launches(launches_, 0), 0, 4).svg;
  const auto loss = polyline(svg, "loss");
  ASSERT_EQ(loss.size(), 3u);  // 9 steps, 3 a point
  const double width = kChartWidth - kPlotLeft - kPlotRight;
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(loss[i].first, kPlotLeft + (1.0 + 3 * i) / 8 * width, 0.051);
  EXPECT_NE(svg.find("each point: mean of 3 steps"), std::string::npos);
}

// A role that records no loss (a DFlash target) numbers its batches from 1 in every launch:
// its launches are laid end to end; the drafter's steps go on from its checkpoint.
TEST(ResumedPipelineReport, UntrainedRolesAreLaidEndToEnd) {
  const std::string dir = make_temp_directory("topotrain-report-pipeline-");
  const std::string path = join_path(dir, kTimingsFileName);
  {
    TimingsTables newest(create_timings_file(path, 2, "target,drafter", 2));
    TimingsTables earlier(create_earlier_launch(newest.location, 2, "target,drafter", 1));
    for (auto [t, drafter_first] : {std::pair<TimingsTables*, int>{&earlier, 1}, {&newest, 3}}) {
      std::vector<double> rows;
      for (int i = 0; i < 3; ++i) {
        append_step_row(rows, {{"step", double(i + 1)}, {"rank", 0}, {"wall", 0.1}, {"forward", 0.1}, {"tokens", 10}});
        append_step_row(rows, {{"step", double(drafter_first + i)}, {"rank", 1}, {"wall", 0.1}, {"backward", 0.1},
                               {"tokens", 10}, {"loss", 1.0}});
      }
      t->steps.append(rows);
    }
  }
  const StitchedRun run = stitch_launches(read_timing_launches(path), 0);
  const RunReport report = analyse_timings(run);
  remove_tree(dir);
  ASSERT_EQ(report.roles.size(), 2u);
  EXPECT_EQ(report.roles[0].rows, 6u);
  EXPECT_EQ(report.roles[0].first_step, 1);
  EXPECT_EQ(report.roles[0].last_step, 6);
  EXPECT_EQ(report.roles[1].rows, 5u);  // 1, 2 of the first launch; 3, 4, 5 of the second
  EXPECT_EQ(report.roles[1].last_step, 5);
  ASSERT_EQ(run.repeated.size(), 1u);
  EXPECT_EQ(run.repeated[0].count, 1);
  EXPECT_EQ(run.repeated[0].first, 3);
}

// Ranks 0 (a target) and 1 (a drafter) on one GPU, rank 2 (a target) alone on another: the
// shared GPU's MFU adds both ranks' FLOPs over the window both ran, [0.1, 1.0] s: the
// target's steps of 100 ms from 0 s (3e10 FLOPs each, its first outside), the drafter's of
// 200 ms from 0.1 s (10 tokens of 6e9 FLOPs each, half of its last inside).
TEST(ReportSharedDevices, RanksOnOneGpuAddTheirFlopsOverTheTimeTheyAllRan) {
  const std::string dir = make_temp_directory("topotrain-report-shared-");
  const std::string path = join_path(dir, kTimingsFileName);
  {
    TimingsTables t(create_timings_file(path, 3, "target,drafter,target"));
    t.ranks.append({0, 0, 1e12, 0, 0, 1, 6e9, 1e12, 0, 0, 2, 0, 1e12, 1, 2});
    std::vector<double> rows;
    for (int step = 1; step <= 10; ++step) {
      for (int rank : {0, 2})
        append_step_row(rows, {{"step", step}, {"rank", rank}, {"start", (step - 1) * 0.1}, {"wall", 0.1},
                               {"forward", 0.1}, {"tokens", 100}, {"flops", 3e10}});
      if (step <= 5)
        append_step_row(rows, {{"step", step}, {"rank", 1}, {"start", 0.1 + (step - 1) * 0.2}, {"wall", 0.2},
                               {"backward", 0.2}, {"tokens", 10}, {"loss", 1}});
    }
    t.steps.append(rows);
  }
  const RunReport report = analyse_timings(stitch_launches({read_timings(path)}, 0));
  ASSERT_EQ(report.shared_devices.size(), 1u);
  const SharedDevice& gpu = report.shared_devices[0];
  EXPECT_EQ(gpu.ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(gpu.roles, (std::vector<std::string>{"target", "drafter"}));
  EXPECT_NEAR(gpu.window_seconds, 0.9, 1e-12);
  ASSERT_EQ(gpu.rank_mfu.size(), 2u);
  EXPECT_NEAR(gpu.rank_mfu[0], 9 * 3e10 / (0.9 * 1e12), 1e-12);
  EXPECT_NEAR(gpu.rank_mfu[1], 4.5 * 10 * 6e9 / (0.9 * 1e12), 1e-12);
  EXPECT_NEAR(gpu.mfu, 0.6, 1e-12);
  const std::string text = format_report(report);
  EXPECT_NE(text.find("one GPU shared by ranks 0 (target) and 1 (drafter): MFU 60.0% of its peak over the 0.9 s they "
                      "all ran (target 30.0%, drafter 30.0%; each rank's FLOPs in that time)"),
            std::string::npos)
      << text;

  // Leaving out each rank's first 2 steps moves the window to [0.5, 1.0] s.
  const RunReport late = analyse_timings(stitch_launches({read_timings(path)}, 2));
  ASSERT_EQ(late.shared_devices.size(), 1u);
  EXPECT_NEAR(late.shared_devices[0].window_seconds, 0.5, 1e-12);
  EXPECT_NEAR(late.shared_devices[0].rank_mfu[1], 2.5 * 10 * 6e9 / (0.5 * 1e12), 1e-12);
  remove_tree(dir);
}

// CPU ranks (device_group -1) and files from before the column name no shared device.
TEST(ReportSharedDevices, NoneWithoutGpuGroups) {
  const std::string dir = make_temp_directory("topotrain-report-unshared-");
  const RunReport report = analyse_timings(stitch_launches({read_timings(write_synthetic(dir))}, 0));
  EXPECT_TRUE(report.shared_devices.empty());
  EXPECT_EQ(format_report(report).find("one GPU shared"), std::string::npos);
  remove_tree(dir);
}
