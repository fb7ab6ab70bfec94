#include <gtest/gtest.h>

#include "topotrain/train/progress.h"

using namespace topotrain;

TEST(Progress, RatesMfuAndEtaOverTheWindow) {
  // 4 devices, 1e9 FLOP per token, 1e15 FLOP/s peak each; 1M tokens to go at the end.
  ProgressMeter meter(4, 1e9, 1e15, 3'000'000);
  StepReport report;
  report.step = 1;
  report.tokens = 1'000'000;
  report.seconds = 1.0;
  report.comm_seconds = 0.25;
  meter.record(report, 1'000'000);
  report.step = 2;
  meter.record(report, 2'000'000);
  std::string line = meter.line();
  EXPECT_NE(line.find("step 2 |"), std::string::npos) << line;
  EXPECT_NE(line.find("1000.0 Ktok/s (250.0 per GPU)"), std::string::npos) << line;
  EXPECT_NE(line.find("MFU 25.0%"), std::string::npos) << line;  // 1e6 tok/s * 1e9 FLOP / 4e15 FLOP/s
  EXPECT_NE(line.find("comm 25%"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 1s"), std::string::npos) << line;
  // The window resets: a slow step afterwards is judged alone.
  report.step = 3;
  report.seconds = 4.0;
  meter.record(report, 2'500'000);
  EXPECT_NE(meter.line().find("250.0 Ktok/s"), std::string::npos);
}

TEST(Progress, DurationFormat) {
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(125), "2m05s");
  EXPECT_EQ(format_duration(2 * 3600 + 13 * 60), "2h13m");
  EXPECT_EQ(format_duration(3 * 86400 + 5 * 3600), "3d05h");
}
