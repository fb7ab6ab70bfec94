// The run's TensorBoard log against the independent event reader (tests/read_tfevents.py):
// every step value under its tag, phase shares from the step's record, extra scalars, and
// the tag list against what is written and what README.md lists.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <limits>
#include <regex>
#include <set>

#include "topotrain/core/files.h"
#include "topotrain/train/tensorboard_log.h"
#include "../readme_listing.h"
#include "../tfevents_reader.h"

using namespace topotrain;

namespace {

// A drafter's step with every optional value, so that every step value is written.
StepReport full_report() {
  StepReport report;
  report.step = 7;
  report.tokens = 1000;
  report.seconds = 0.5;
  report.loss = 2.75;
  report.lr = 3e-4;
  report.grad_norm = 0.5;
  report.peak_memory = std::int64_t{3} << 30;
  report.collectives = 2;
  report.aux_loss = 0.125;
  report.peak_expert_load = 1.5;
  report.starved_seconds = 0.25;
  report.eval_loss = 2.5;
  report.draft = {{4, 3, 1}, {4, 4, 4}, {4, 2, 1}, {4, 2, 2}};
  report.eval_draft = {{0, 1, 1}, {0, 2, 4}, {0, 1, 1}, {0, 1, 2}};
  report.eval_decoded_tau = 2.5;
  report.eval_decoded_trivial_tau = 1.25;
  return report;
}

// 1 GFLOP per token on devices of 1 TFLOP/s: steps have an MFU.
ProgressConfig known_peak() {
  ProgressConfig config;
  config.flops_per_token = 1e9;
  config.peak_flops = 1e12;
  return config;
}

// The tag list's name of a written tag: a draft slot's tag is listed once, as <slot>.
std::string listed_as(const std::string& tag) {
  return std::regex_replace(tag, std::regex("^(draft/accuracy|eval/draft_accuracy)/[0-9]+$"), "$1/<slot>");
}

}  // namespace

// Every step value under its tag at the step (float precision; a skipped step's NaN loss
// left out), the record's phase shares of the step's wall and a drafter's queue depth.
// Every tag the step values
// and the record give is one of kTensorBoardTags, and every listed tag is written here.
TEST(TensorBoardLog, StepValuesPhaseSharesAndExtraScalars) {
  const std::string run_dir = make_temp_directory("topotrain-tensorboard-");
  const ProgressConfig config = known_peak();
  {
    TensorBoardLog log(run_dir);
    EXPECT_EQ(parent_directory(log.path()), join_path(run_dir, kTensorBoardDirName));
    log.record_step(7, 1.7e9, step_values(full_report(), 5000, false, config));
    StepRecord record;
    record.step = 7;
    record.wall = 2.0;
    record.phase_seconds[static_cast<std::size_t>(Phase::forward)] = 0.5;
    record.phase_seconds[static_cast<std::size_t>(Phase::backward)] = 1.0;
    record.metrics.queue_depth = 3;
    log.record_timing(record);
    StepReport skipped = full_report();
    skipped.step = 8;
    skipped.loss = std::numeric_limits<double>::quiet_NaN();
    log.record_step(8, 1.7e9 + 1, step_values(skipped, 6000, true, config));
  }
  const auto files = test_support::read_tfevents(test_support::files_in(join_path(run_dir, kTensorBoardDirName)));
  ASSERT_EQ(files.size(), 1u);
  const auto& events = files[0]["events"];
  ASSERT_EQ(events.size(), 3u);
  const auto& values = events[0]["values"];
  EXPECT_EQ(events[0]["step"], 7);
  EXPECT_DOUBLE_EQ(events[0]["wall_time"].get<double>(), 1.7e9);
  EXPECT_EQ(values["train/loss"].get<double>(), 2.75);
  EXPECT_EQ(values["train/lr"].get<double>(), static_cast<double>(3e-4f));
  EXPECT_EQ(values["train/tokens_total"].get<double>(), 5000);
  EXPECT_EQ(values["train/skipped"].get<double>(), 0);
  EXPECT_EQ(values["perf/tokens_per_s"].get<double>(), 2000);
  EXPECT_EQ(values["perf/mfu"].get<double>(), 2);  // 1000 x 1e9 FLOP in 0.5 s on one device of 1e12
  EXPECT_EQ(values["perf/memory_bytes"].get<double>(), static_cast<double>(std::int64_t{3} << 30));
  EXPECT_EQ(values["draft/accuracy/1"].get<double>(), 0.75);
  EXPECT_EQ(values["draft/accuracy/2"].get<double>(), 0.25);
  EXPECT_FALSE(values.contains("draft/accuracy/3"));
  const auto& timing = events[1]["values"];
  EXPECT_EQ(events[1]["step"], 7);
  EXPECT_EQ(timing["phase/forward"].get<double>(), 0.25);
  EXPECT_EQ(timing["phase/backward"].get<double>(), 0.5);
  EXPECT_EQ(timing["phase/data_wait"].get<double>(), 0);
  EXPECT_EQ(timing["phase/other"].get<double>(), 0.25);
  EXPECT_EQ(timing["perf/queue_depth"].get<double>(), 3);
  EXPECT_EQ(events[2]["step"], 8);
  EXPECT_FALSE(events[2]["values"].contains("train/loss"));
  EXPECT_EQ(events[2]["values"]["train/skipped"].get<double>(), 1);
  EXPECT_EQ(values["eval/loss"].get<double>(), 2.5);
  EXPECT_EQ(values["eval/tau"].get<double>(), 1 + 0.5 + 0.5 * 0.25);
  EXPECT_EQ(values["eval/draft_accuracy/1"].get<double>(), 0.5);
  EXPECT_EQ(values["eval/draft_accuracy/2"].get<double>(), 0.25);

  const std::set<std::string> listed(kTensorBoardTags.begin(), kTensorBoardTags.end());
  std::set<std::string> written;
  for (std::size_t e = 0; e < 3; ++e)
    for (const auto& [tag, value] : events[e]["values"].items()) {
      EXPECT_TRUE(listed.count(listed_as(tag))) << tag << " is written but not in kTensorBoardTags";
      written.insert(listed_as(tag));
    }
  EXPECT_EQ(written, listed);
  remove_tree(run_dir);
}

// A step record without a wall time (nothing timed) gives no shares, and no event without
// a queue depth either.
TEST(TensorBoardLog, UntimedRecordWritesNothing) {
  const std::string run_dir = make_temp_directory("topotrain-tensorboard-");
  {
    TensorBoardLog log(run_dir);
    log.record_timing(StepRecord{});
  }
  const auto files = test_support::read_tfevents(test_support::files_in(join_path(run_dir, kTensorBoardDirName)));
  ASSERT_EQ(files.size(), 1u);
  EXPECT_TRUE(files[0]["events"].empty());
  remove_tree(run_dir);
}

// README.md names every tag in its TensorBoard line, and no other.
TEST(TensorBoardLog, ReadmeListsTheTags) {
  EXPECT_EQ(test_support::readme_listing("TensorBoard tags:"),
            std::set<std::string>(kTensorBoardTags.begin(), kTensorBoardTags.end()));
}
