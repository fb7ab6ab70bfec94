#include <gtest/gtest.h>

#include <map>

#include "../source_text.h"
#include "topotrain/core/run_file.h"
#include "topotrain/store/phase_timer.h"
#include "topotrain/store/run_stitch.h"
#include "topotrain/store/timings_file.h"
#include "topotrain/store/topology_advice.h"

using namespace topotrain;
using topotrain::test_support::read_source_file;

namespace {

using Row = std::map<std::string, double>;  // /steps fields of one row; the rest 0 (loss unset)

// One launch of `roles` (per rank) where every rank records `steps` rows equal to its
// role's row, built in memory in the layout of timings_file.h; `device_groups`, per rank,
// fill /ranks' device_group (none: no /ranks, as in older files).
StitchedRun synthetic_run(const std::vector<std::string>& roles, const std::map<std::string, Row>& row_of_role,
                          int steps = 8, const std::vector<int>& device_groups = {}) {
  TimingsData data;
  data.path = "synthetic.h5";
  data.world_size = static_cast<int>(roles.size());
  data.roles = roles;
  if (!device_groups.empty()) {
    data.ranks.fields = rank_fields();
    for (std::size_t rank = 0; rank < device_groups.size(); ++rank) {
      for (const std::string& field : data.ranks.fields)
        data.ranks.values.push_back(field == "rank"           ? static_cast<double>(rank)
                                    : field == "device_group" ? device_groups[rank]
                                                              : 0);
      ++data.ranks.rows;
    }
  }
  data.steps.fields = step_fields({});
  for (int step = 1; step <= steps; ++step)
    for (std::size_t rank = 0; rank < roles.size(); ++rank) {
      Row row = row_of_role.at(roles[rank]);
      row["step"] = step;
      row["rank"] = static_cast<double>(rank);
      row["start"] = step * row["wall"];
      for (const std::string& field : data.steps.fields)
        data.steps.values.push_back(row.count(field) ? row.at(field) : field == "loss" ? StepMetrics::kUnset : 0);
      ++data.steps.rows;
    }
  return stitch_launches({data}, 0);
}

std::vector<std::string> split_roles(int targets, int drafters) {
  std::vector<std::string> roles(static_cast<std::size_t>(targets), "target");
  roles.insert(roles.end(), static_cast<std::size_t>(drafters), "drafter");
  return roles;
}

const SplitPrediction& split(const TopologyAdvice& advice, int targets, int drafters) {
  for (const SplitPrediction& p : advice.splits)
    if (p.targets == targets && p.drafters == drafters) return p;
  throw std::logic_error("no such split");
}

}  // namespace

// 7 targets that wait 80% of their time on a full queue feed a drafter that never starves.
TEST(TopologyAdvice, DrafterBoundSevenToOneRecommendsMoreDrafters) {
  const std::map<std::string, Row> rows = {
      {"target", {{"forward", 0.02}, {"queue_wait", 0.08}, {"wall", 0.1}, {"tokens", 1000}}},
      {"drafter", {{"forward", 0.03}, {"backward", 0.06}, {"comm_wait", 0.001}, {"optimizer", 0.009}, {"wall", 0.1},
                   {"tokens", 1000}, {"loss", 2}}}};
  const StitchedRun run = synthetic_run(split_roles(7, 1), rows);
  const TopologyAdvice advice = advise_topology(run);
  ASSERT_TRUE(advice.applicable) << advice.reason;
  EXPECT_EQ(advice.targets, 7);
  EXPECT_EQ(advice.drafters, 1);
  EXPECT_NEAR(advice.target_rate, 1000 / 0.02, 1e-6);
  // One drafter: its comm_wait is no all-reduce, so it stays in the step's compute.
  EXPECT_FALSE(advice.allreduce_known);
  EXPECT_NEAR(advice.drafter_compute_seconds, 0.1, 1e-12);
  EXPECT_NEAR(advice.measured_throughput, 10000, 1e-6);
  EXPECT_NEAR(advice.measured.throughput, 10000, 1e-6);
  EXPECT_EQ(advice.measured.bound, "drafters");
  // D' drafters train D' x 10000 tok/s until the (8 - D') targets' 50000 each bound them;
  // every drafter needs a target of its own, so 4t4d is the most drafters there can be.
  for (int d = 1; d <= 4; ++d)
    EXPECT_NEAR(split(advice, 8 - d, d).throughput, std::min((8 - d) * 50000.0, d * 10000.0), 1e-6) << d;
  ASSERT_EQ(advice.splits.size(), 4u);
  EXPECT_EQ(advice.splits.front().targets, 4);
  EXPECT_EQ(advice.splits.front().drafters, 4);
  EXPECT_NEAR(advice.splits.front().speedup, 4, 1e-9);
  EXPECT_EQ(advice.recommended().drafters, 4);
  const std::string text = format_topology_advice(advice, 3);
  EXPECT_NE(text.find("recommended split: 4t4d (x4.00 predicted, bound by drafters)"), std::string::npos) << text;
  EXPECT_NE(text.find("upper bounds"), std::string::npos) << text;
  EXPECT_EQ(text.find("ranks shared GPUs"), std::string::npos) << text;

  // The same rates from seven targets on one GPU and the drafter on another: the model cannot
  // know what a split that moves ranks between GPUs does to them, and says so.
  const TopologyAdvice shared_advice =
      advise_topology(synthetic_run(split_roles(7, 1), rows, 8, {0, 0, 0, 0, 0, 0, 0, 7}));
  EXPECT_TRUE(shared_advice.ranks_shared_gpus);
  EXPECT_NE(format_topology_advice(shared_advice, 3).find("ranks shared GPUs"), std::string::npos);
  EXPECT_FALSE(advise_topology(synthetic_run(split_roles(7, 1), rows, 8, {0, 1, 2, 3, 4, 5, 6, 7})).ranks_shared_gpus);

  // The file written for it is the demo's topology with those role counts.
  const std::string written = recommended_topology_text(advice, read_source_file("topology/cpu-7t1d.toml"), "demo");
  const Topology t = parse_topology(written, "written");
  EXPECT_EQ(t.find_role("target")->ranks.size(), 4u);
  EXPECT_EQ(t.find_role("drafter")->ranks.size(), 4u);
  EXPECT_EQ(written.rfind("# Re-split by topotrain-report: 4t4d, predicted x4.00 over the measured 7t1d", 0), 0u)
      << written;
}

// A step that evaluated the held-out documents spent its eval phase training nothing: the
// drafter's compute per step is that of the same run without it.
TEST(TopologyAdvice, HeldOutEvaluationIsNoDrafterCompute) {
  const StitchedRun run = synthetic_run(
      split_roles(7, 1),
      {{"target", {{"forward", 0.02}, {"queue_wait", 0.08}, {"wall", 0.1}, {"tokens", 1000}}},
       {"drafter", {{"forward", 0.03}, {"backward", 0.06}, {"eval", 0.05}, {"optimizer", 0.01}, {"wall", 0.15},
                    {"tokens", 1000}, {"loss", 2}}}});
  const TopologyAdvice advice = advise_topology(run);
  ASSERT_TRUE(advice.applicable) << advice.reason;
  EXPECT_NEAR(advice.drafter_compute_seconds, 0.1, 1e-12);
}

// 2 targets that never wait feed 2 drafters starved 60% of the time, whose all-reduce takes
// 10 ms of a 100 ms step.
TEST(TopologyAdvice, TargetBoundRecommendsMoreTargets) {
  const StitchedRun run = synthetic_run(
      split_roles(2, 2),
      {{"target", {{"forward", 0.1}, {"wall", 0.1}, {"tokens", 1000}}},
       {"drafter", {{"queue_wait", 0.06}, {"backward", 0.03}, {"comm_wait", 0.01}, {"wall", 0.1}, {"tokens", 1000},
                    {"loss", 2}}}});
  const TopologyAdvice advice = advise_topology(run);
  ASSERT_TRUE(advice.applicable) << advice.reason;
  EXPECT_TRUE(advice.allreduce_known);
  EXPECT_NEAR(advice.allreduce_seconds, 0.01, 1e-12);
  EXPECT_NEAR(advice.drafter_compute_seconds, 0.03, 1e-12);
  EXPECT_EQ(advice.measured.bound, "targets");
  EXPECT_NEAR(advice.measured.throughput, 20000, 1e-6);
  // 3t1d: one drafter has no all-reduce: 1000 tokens in 30 ms, above the targets' 30000.
  EXPECT_NEAR(split(advice, 3, 1).throughput, 30000, 1e-6);
  EXPECT_EQ(split(advice, 3, 1).bound, "targets");
  EXPECT_EQ(advice.recommended().targets, 3);
  EXPECT_NEAR(advice.recommended().speedup, 1.5, 1e-9);
}

// The all-reduce measured with 2 drafters scales as 2(D-1)/D and vanishes with one.
TEST(TopologyAdvice, AllReduceScalesWithTheRingAndVanishesForOneDrafter) {
  const StitchedRun run = synthetic_run(
      split_roles(4, 2),
      {{"target", {{"forward", 0.01}, {"queue_wait", 0.09}, {"wall", 0.1}, {"tokens", 1000}}},
       {"drafter", {{"backward", 0.04}, {"comm_wait", 0.01}, {"wall", 0.05}, {"tokens", 1000}, {"loss", 2}}}});
  const TopologyAdvice advice = advise_topology(run);
  ASSERT_TRUE(advice.applicable) << advice.reason;
  EXPECT_NEAR(split(advice, 5, 1).throughput, 1000 / 0.04, 1e-6);
  EXPECT_NEAR(split(advice, 4, 2).throughput, 2 * 1000 / 0.05, 1e-6);
  EXPECT_NEAR(split(advice, 3, 3).throughput, 3 * 1000 / (0.04 + 0.01 * (4.0 / 3.0)), 1e-6);
  EXPECT_EQ(split(advice, 3, 3).bound, "drafters");
  EXPECT_EQ(advice.recommended().drafters, 3);
}

// 3t1d and 2t2d predict the same: the measured split stays first and is kept.
TEST(TopologyAdvice, TiesAndSmallGainsKeepTheMeasuredSplit) {
  const StitchedRun run = synthetic_run(
      split_roles(3, 1),
      {{"target", {{"forward", 0.05}, {"queue_wait", 0.05}, {"wall", 0.1}, {"tokens", 500}}},
       {"drafter", {{"backward", 0.05}, {"wall", 0.05}, {"tokens", 1000}, {"loss", 2}}}});
  const TopologyAdvice advice = advise_topology(run);
  ASSERT_TRUE(advice.applicable) << advice.reason;
  EXPECT_NEAR(split(advice, 3, 1).throughput, 20000, 1e-6);
  EXPECT_NEAR(split(advice, 2, 2).throughput, 20000, 1e-6);
  EXPECT_EQ(advice.splits.front().targets, 3);
  EXPECT_EQ(advice.splits[1].targets, 2);
  EXPECT_EQ(advice.recommended().targets, 3);
  EXPECT_NE(format_topology_advice(advice, 3).find("recommended split: keep 3t1d"), std::string::npos);

  // 4% more (2t2d: the 2 targets' 20000 over the drafter's 1000 tokens in 52 ms) is less
  // than the model can tell apart: kept as well.
  const StitchedRun close = synthetic_run(
      split_roles(3, 1),
      {{"target", {{"forward", 0.1}, {"wall", 0.1}, {"tokens", 1000}}},
       {"drafter", {{"backward", 0.052}, {"wall", 0.052}, {"tokens", 1000}, {"loss", 2}}}});
  const TopologyAdvice small_gain = advise_topology(close);
  EXPECT_NEAR(small_gain.splits.front().speedup, 1.04, 1e-9);
  EXPECT_EQ(small_gain.splits.front().drafters, 2);
  EXPECT_EQ(small_gain.recommended().drafters, 1);
}

TEST(TopologyAdvice, OnlyForPipelinesOfBothRoles) {
  const StitchedRun trainers = synthetic_run(
      {"trainer", "trainer"}, {{"trainer", {{"forward", 0.1}, {"wall", 0.1}, {"tokens", 1000}, {"loss", 2}}}});
  const TopologyAdvice advice = advise_topology(trainers);
  EXPECT_FALSE(advice.applicable);
  EXPECT_EQ(advice.reason, "not a DFlash run of targets and drafters");
  EXPECT_EQ(format_topology_advice(advice, 3), "");
}

// F = 30 - 10 ms of all-reduce not hidden + 20 ms optimizer; M = the other 60 ms.
TEST(AccumulationAdvice, FixedCostsPerStepMakeGradAccumTheLever) {
  const StitchedRun run = synthetic_run(
      {"trainer", "trainer"},
      {{"trainer", {{"forward", 0.02}, {"backward", 0.04}, {"comm_wait", 0.03}, {"comm_overlap", 0.01},
                    {"optimizer", 0.02}, {"wall", 0.1}, {"tokens", 1000}, {"loss", 2}}}});
  const AccumulationAdvice advice = advise_accumulation(run);
  ASSERT_TRUE(advice.applicable);
  EXPECT_NEAR(advice.fixed_seconds, 0.04, 1e-12);
  EXPECT_NEAR(advice.per_step_batches_seconds, 0.06, 1e-12);
  EXPECT_NEAR(advice.doubled_speedup, 2 * 0.1 / (0.04 + 0.12), 1e-12);
  EXPECT_NE(format_accumulation_advice(advice).find("lever: train.grad_accum"), std::string::npos);

  const StitchedRun compute = synthetic_run(
      {"trainer"}, {{"trainer", {{"forward", 0.04}, {"backward", 0.059}, {"optimizer", 0.001}, {"wall", 0.1},
                                 {"tokens", 1000}, {"loss", 2}}}});
  const AccumulationAdvice little = advise_accumulation(compute);
  EXPECT_LT(little.doubled_speedup, kMinAdvisedSpeedup);
  EXPECT_NE(format_accumulation_advice(little).find("lever: neither much"), std::string::npos);
  EXPECT_FALSE(advise_accumulation(synthetic_run(split_roles(1, 1),
                                                 {{"target", {{"forward", 0.1}, {"wall", 0.1}, {"tokens", 10}}},
                                                  {"drafter", {{"backward", 0.1}, {"wall", 0.1}, {"tokens", 10},
                                                               {"loss", 2}}}}))
                   .applicable);
}
