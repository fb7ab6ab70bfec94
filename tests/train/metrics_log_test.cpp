#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include "topotrain/core/files.h"
#include "topotrain/train/metrics_log.h"
#include "../readme_listing.h"

using namespace topotrain;

namespace {

std::vector<nlohmann::json> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

StepReport report_of(std::int64_t step) {
  StepReport report;
  report.step = step;
  report.tokens = 1000;
  report.seconds = 0.5;
  report.loss = 2.0 + static_cast<double>(step);
  report.lr = 1e-3;
  report.grad_norm = 0.25;
  report.peak_memory = std::int64_t{3} << 30;
  report.collectives = 2;
  return report;
}

// The line the session writes for `report`.
void record(MetricsLog& log, const StepReport& report, std::int64_t tokens_total, bool skipped,
            const ProgressConfig& config = {}) {
  log.record(report.step, 1.7e9, step_values(report, tokens_total, skipped, config));
}

}  // namespace

// One flushed line per step with what the step did; MFU from the config's FLOPs and peak.
TEST(MetricsLog, OneLinePerStepWithTheStepsValues) {
  const std::string dir = make_temp_directory("topotrain-metrics-");
  ProgressConfig config;
  config.ranks = 2;
  config.flops_per_token = 1e9;
  config.peak_flops = 1e12;
  {
    MetricsLog log(dir, 1);
    record(log, report_of(1), 1000, false, config);
    StepReport aux = report_of(2);
    aux.aux_loss = 0.125;
    aux.peak_expert_load = 1.5;
    record(log, aux, 2000, false, config);
    // Read before the log closes: every line is flushed as it is written.
    const auto lines = lines_of(join_path(dir, kMetricsFileName));
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0]["step"], 1);
    EXPECT_DOUBLE_EQ(lines[0]["time"].get<double>(), 1.7e9);
    EXPECT_TRUE(lines[0]["tokens_total"].is_number_integer());
    EXPECT_EQ(lines[0]["launch"], 1);
    EXPECT_EQ(lines[0]["tokens"], 1000);
    EXPECT_EQ(lines[1]["tokens_total"], 2000);
    EXPECT_DOUBLE_EQ(lines[0]["loss"].get<double>(), 3.0);
    EXPECT_DOUBLE_EQ(lines[0]["tokens_per_s"].get<double>(), 2000.0);
    // 1000 tokens x 1e9 FLOP in 0.5 s on 2 devices of 1e12: 100%.
    EXPECT_DOUBLE_EQ(lines[0]["mfu"].get<double>(), 1.0);
    EXPECT_EQ(lines[0]["memory_bytes"], std::int64_t{3} << 30);
    EXPECT_FALSE(lines[0].contains("aux_loss"));
    EXPECT_DOUBLE_EQ(lines[1]["aux_loss"].get<double>(), 0.125);
    EXPECT_FALSE(lines[0].contains("peak_expert_load"));
    EXPECT_DOUBLE_EQ(lines[1]["peak_expert_load"].get<double>(), 1.5);
    EXPECT_FALSE(lines[1]["skipped"].get<bool>());
  }
  remove_tree(dir);
}

// A resumed launch appends, numbered; a skipped step's non-finite loss is null; a drafter's
// slots give tau and per-slot accuracy. Every key written is one of kMetricsKeys.
TEST(MetricsLog, LaunchesAppendAndEveryKeyIsListed) {
  const std::string dir = make_temp_directory("topotrain-metrics-");
  {
    MetricsLog log(dir, 1);
    record(log, report_of(1), 1000, false);
  }
  {
    // The launch's number is timings.h5's (TimingLog::launch): launch 2 recorded no step.
    MetricsLog log(dir, 3);
    StepReport skipped = report_of(2);
    skipped.loss = std::numeric_limits<double>::quiet_NaN();
    record(log, skipped, 1000, true);
    StepReport draft = report_of(3);
    draft.draft = {{4, 3, 1}, {4, 4, 4}, {4, 2, 2}, {4, 2, 3}};  // slot 0 is the anchor, not predicted
    draft.starved_seconds = 0.1;
    draft.eval_loss = 2.5;
    draft.eval_draft = {{0, 2, 1}, {0, 4, 2}, {0, 1, 1}, {0, 2, 2}};
    draft.eval_decoded_tau = 2.5;
    draft.eval_decoded_trivial_tau = 1.25;
    record(log, draft, 2000, false);
  }
  const auto lines = lines_of(join_path(dir, kMetricsFileName));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["launch"], 1);
  EXPECT_EQ(lines[1]["launch"], 3);
  EXPECT_TRUE(lines[1]["loss"].is_null());
  EXPECT_TRUE(lines[1]["skipped"].get<bool>());
  EXPECT_FALSE(lines[1].contains("mfu"));  // no peak known
  ASSERT_EQ(lines[2]["draft_accuracy"].size(), 2u);
  EXPECT_DOUBLE_EQ(lines[2]["draft_accuracy"][0].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(lines[2]["draft_accuracy"][1].get<double>(), 0.25);
  EXPECT_TRUE(lines[2].contains("tau"));
  EXPECT_DOUBLE_EQ(lines[2]["tau_mode"].get<double>(), 1 + 0.5 + 0.5 * 0.5);
  EXPECT_DOUBLE_EQ(lines[2]["tau_slot_mode"].get<double>(), 1 + 0.5 + 0.5 * 0.75);
  EXPECT_DOUBLE_EQ(lines[2]["eval_tau_mode"].get<double>(), 1 + 0.25 + 0.25 * 0.5);
  EXPECT_DOUBLE_EQ(lines[2]["eval_tau_slot_mode"].get<double>(), 1 + 0.5 + 0.5);
  EXPECT_DOUBLE_EQ(lines[2]["eval_decoded_tau"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(lines[2]["eval_decoded_trivial_tau"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(lines[2]["eval_loss"].get<double>(), 2.5);
  EXPECT_FALSE(lines[0].contains("eval_loss"));  // only on the steps that evaluated
  ASSERT_EQ(lines[2]["eval_draft_accuracy"].size(), 2u);
  EXPECT_DOUBLE_EQ(lines[2]["eval_draft_accuracy"][1].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(lines[2]["eval_tau"].get<double>(), 1 + 0.5 + 0.5 * 0.5);  // 1 + acc_1 + acc_1 acc_2
  EXPECT_FALSE(lines[0].contains("eval_tau"));
  const std::set<std::string> listed(kMetricsKeys.begin(), kMetricsKeys.end());
  std::set<std::string> written;
  for (const auto& line : lines)
    for (const auto& [key, value] : line.items()) {
      EXPECT_TRUE(listed.count(key)) << key << " is written but not in kMetricsKeys";
      written.insert(key);
    }
  // All but mfu, aux_loss and peak_expert_load appear in these lines.
  EXPECT_EQ(written.size() + 3, listed.size());
  remove_tree(dir);
}

// README.md names every key in its metrics.jsonl line, and no other.
TEST(MetricsLog, ReadmeListsTheKeys) {
  EXPECT_EQ(test_support::readme_listing("`metrics.jsonl` keys:"),
            std::set<std::string>(kMetricsKeys.begin(), kMetricsKeys.end()));
}
