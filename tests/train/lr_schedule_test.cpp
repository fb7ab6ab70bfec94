#include <gtest/gtest.h>

#include <cmath>

#include "topotrain/train/lr_schedule.h"

using topotrain::LrSchedule;

TEST(LrSchedule, WarmupThenCosineToFloor) {
  LrSchedule s{1.0, 0.1, 0.1, 1000};
  EXPECT_GT(s.at(0), 0.0);
  EXPECT_LT(s.at(0), 0.02);
  EXPECT_LT(s.at(50), s.at(99));
  EXPECT_NEAR(s.at(100), 1.0, 1e-12);                        // end of warmup: the peak
  EXPECT_NEAR(s.at(550), 0.1 + 0.9 * 0.5, 1e-12);            // halfway through the cosine
  EXPECT_NEAR(s.at(1000), 0.1, 1e-12);                       // the floor
  EXPECT_NEAR(s.at(5000), 0.1, 1e-12);                       // and it stays there
  for (int t = 101; t < 1000; t += 37) EXPECT_LE(s.at(t), s.at(t - 1) + 1e-15);
}

TEST(LrSchedule, NoLengthMeansConstantPeak) {
  LrSchedule s{3e-4, 0.1, 0.04, 0};
  EXPECT_EQ(s.at(0), 3e-4);
  EXPECT_EQ(s.at(123456), 3e-4);
}
