#include <gtest/gtest.h>

#include <regex>

#include "topotrain/core/process_memory.h"
#include "topotrain/train/progress.h"

using namespace topotrain;

namespace {

bool has(const std::string& line, const std::string& part) { return line.find(part) != std::string::npos; }

StepReport step_of(std::int64_t step, std::int64_t tokens, double seconds) {
  StepReport report;
  report.step = step;
  report.tokens = tokens;
  report.seconds = seconds;
  return report;
}

}  // namespace

TEST(Progress, RatesMfuAndEtaOverTheWindow) {
  // 4 devices, 1e9 FLOP per token, 1e15 FLOP/s peak each; 1M tokens to go at the end.
  ProgressConfig config;
  config.ranks = 4;
  config.flops_per_token = 1e9;
  config.peak_flops = 1e15;
  config.planned_tokens = 3'000'000;
  ProgressMeter meter(config);
  StepReport report = step_of(1, 1'000'000, 1.0);
  report.comm_seconds = 0.25;
  report.aux_loss = 0.5;
  report.peak_expert_load = 2.0;
  meter.record(report, 1'000'000);
  report.step = 2;
  report.aux_loss = 0.25;
  report.peak_expert_load = 1.5;
  meter.record(report, 2'000'000);
  EXPECT_TRUE(meter.pending());
  std::string line = meter.line();
  EXPECT_FALSE(meter.pending());
  // aux and load: the window's means
  EXPECT_TRUE(has(line, "step 2 | loss 0.0000 aux 0.3750 load 1.75 | lr ")) << line;
  EXPECT_TRUE(has(line, "1.00 Mtok/s (250 Ktok/s per GPU)")) << line;
  EXPECT_TRUE(has(line, "MFU 25.0%")) << line;  // 1e6 tok/s * 1e9 FLOP / 4e15 FLOP/s
  EXPECT_TRUE(has(line, "comm 25%")) << line;
  EXPECT_TRUE(has(line, "ETA 1s")) << line;
  EXPECT_FALSE(has(line, "tau")) << line;
  EXPECT_FALSE(has(line, "starved")) << line;
  // The window resets: a slow step afterwards is judged alone. Without a host wait on
  // collectives (a GPU rank's is device time) the line claims no comm share.
  meter.record(step_of(3, 1'000'000, 4.0), 2'500'000);
  line = meter.line();
  EXPECT_TRUE(has(line, "250 Ktok/s")) << line;
  EXPECT_FALSE(has(line, "comm")) << line;
  EXPECT_FALSE(has(line, "aux")) << line;  // a dense model's step reports neither
  EXPECT_FALSE(has(line, "load")) << line;
}

TEST(Progress, NumberFormatsAndTheLossWindowMean) {
  ProgressMeter meter(ProgressConfig{});
  StepReport report = step_of(7, 1000, 1.0);
  report.loss = 3.0;
  report.loss_weight = 100;  // targets
  report.lr = 0.000737249;
  report.grad_norm = 0.812345;
  report.peak_memory = std::int64_t{3} << 29;  // 1.5 GiB
  report.collectives = 2;
  meter.record(report, 1000);
  report.step = 8;
  report.loss = 1.0;
  report.loss_weight = 300;
  report.grad_norm = 1.5;
  meter.record(report, 2000);
  const std::string line = meter.line();
  // (3 * 100 + 1 * 300) / 400 = 1.5; lr, gnorm, coll and memory are the last step's.
  EXPECT_TRUE(has(line, "step 8 | loss 1.5000 | lr 7.37e-04 | gnorm 1.5 | 1.00 Ktok/s (1.00 Ktok/s per GPU)")) << line;
  EXPECT_TRUE(has(line, " | 2 coll | mem 1.50 GiB")) << line;
  EXPECT_FALSE(has(line, "MFU")) << line;  // no peak FLOP/s known
  EXPECT_FALSE(has(line, "ETA")) << line;  // no limit known
}

TEST(Progress, EtaFromEpochTokensOrStepsWhicheverEndsFirst) {
  // Epoch mode: no max_steps, the schedule's tokens (epochs x dataset tokens) decide.
  ProgressConfig config;
  config.planned_tokens = 10'000;
  ProgressMeter by_tokens(config);
  by_tokens.record(step_of(1, 1000, 2.0), 1000);  // 500 tok/s, 9000 to go: 18 s
  EXPECT_TRUE(has(by_tokens.line(), "| ETA 18s")) << "epoch mode";
  // A step limit that ends sooner: 3 steps left at 2 s each.
  config.max_steps = 4;
  ProgressMeter by_steps(config);
  by_steps.record(step_of(1, 1000, 2.0), 1000);
  EXPECT_TRUE(has(by_steps.line(), "| ETA 6s"));
  // The last step's line has nothing left to estimate.
  by_steps.record(step_of(4, 1000, 2.0), 4000);
  EXPECT_FALSE(has(by_steps.line(), "ETA"));
}

TEST(Progress, DrafterFieldsFromTheWindowsCounts) {
  ProgressConfig config;
  config.ranks = 2;
  config.peak_flops = 1e12;
  ProgressMeter meter(config);
  StepReport report = step_of(5, 2000, 1.0);
  report.flops = 1e12;  // over both drafters: MFU 1e12 / (2 x 1e12)
  report.starved_seconds = 0.25;
  report.comm_seconds = 0.125;
  // Slot 0 is the anchor; slots 1 and 2: 3 of 4 and 1 of 4 right over the two steps; the
  // mode drafter 2 of 4 and 2 of 4, the slot-mode drafter 2 of 4 and 4 of 4.
  report.draft = {{9, 2, 1}, {9, 2, 2}, {9, 1, 1}, {9, 1, 2}};
  meter.record(report, 2000);
  report.step = 6;
  report.starved_seconds = 0.75;
  report.draft = {{9, 1, 0}, {9, 2, 2}, {9, 1, 1}, {9, 1, 2}};
  meter.record(report, 4000);
  const std::string line = meter.line();
  // acc@1 = 0.75, acc@2 = 0.25: tau = 1 + 0.75 + 0.75 x 0.25 = 1.9375; the mode drafter's
  // 1 + 0.5 + 0.25 = 1.75, the slot-mode drafter's 1 + 0.5 + 0.5 = 2.
  EXPECT_TRUE(has(line, "step 6 | loss 0.0000 | tau 1.94 acc@1 0.750 (trivial drafters: mode 1.75 0.500, slot-mode "
                        "2.00 0.500) | lr "))
      << line;
  EXPECT_TRUE(has(line, " | MFU 50.0% | comm 12% | starved 50% | ")) << line;
}

TEST(Progress, CpuRanksSayPerRankAndShowTheResidentSet) {
  ProgressConfig config;
  config.ranks = 2;
  config.cpu = true;
  ProgressMeter meter(config);
  StepReport report = step_of(1, 1000, 1.0);
  report.peak_memory = 0;  // what a CPU device reports
  meter.record(report, 1000);
  const std::string line = meter.line();
  EXPECT_TRUE(has(line, "1.00 Ktok/s (500 tok/s per rank)")) << line;
  EXPECT_FALSE(has(line, "per GPU")) << line;
  std::smatch rss;
  ASSERT_TRUE(std::regex_search(line, rss, std::regex(R"(\| rss ([0-9.]+) GiB)"))) << line;
  // This test process is resident: more than a MiB, within 10% of a fresh reading.
  const double shown = std::stod(rss[1]) * (1 << 30);
  EXPECT_GT(shown, 1 << 20);
  EXPECT_NEAR(shown, static_cast<double>(resident_set_bytes()), 0.1 * static_cast<double>(resident_set_bytes()) + 1e7);
  EXPECT_FALSE(has(line, "mem ")) << line;
}

TEST(Progress, DurationFormat) {
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(125), "2m05s");
  EXPECT_EQ(format_duration(2 * 3600 + 13 * 60), "2h13m");
  EXPECT_EQ(format_duration(3 * 86400 + 5 * 3600), "3d05h");
}
