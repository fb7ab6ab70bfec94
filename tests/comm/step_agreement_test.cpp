#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <limits>

#include "topotrain/comm/step_agreement.h"

using namespace topotrain::comm;

// Each field reduces its own way, in the one buffer: sums add, ranks take the lowest that
// is set, the peak the largest among out-of-memory ranks only, flags any.
TEST(StepAgreement, EveryFieldReducesItsOwnWay) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  StepAgreement mine;
  mine.sums = {1.0 + rank, 0.5 * rank};
  const bool last = rank == size - 1;
  if (rank >= 1) {  // ranks 1.. ran out of memory; the highest with the largest peak
    mine.oom_rank = rank;
    mine.oom_peak = std::int64_t{1} << (33 + rank);  // beyond 32 bits
  }
  if (rank == 0) mine.oom_peak = std::int64_t{1} << 50;  // not out of memory: not counted
  if (last) mine.nonfinite_rank = rank;
  mine.stop = last;
  mine.checkpoint_writing = rank == 0;
  const StepAgreement all = agree_step(mine, MPI_COMM_WORLD);
  double first = 0, second = 0;
  for (int r = 0; r < size; ++r) first += 1.0 + r, second += 0.5 * r;
  ASSERT_EQ(all.sums.size(), 2u);
  EXPECT_EQ(all.sums[0], first);
  EXPECT_EQ(all.sums[1], second);
  EXPECT_EQ(all.oom_rank, size > 1 ? 1 : -1);
  EXPECT_EQ(all.oom_peak, size > 1 ? std::int64_t{1} << (33 + size - 1) : 0);
  EXPECT_EQ(all.nonfinite_rank, size - 1);
  EXPECT_TRUE(all.stop);
  EXPECT_TRUE(all.checkpoint_writing);
}

TEST(StepAgreement, NothingSetAgreesOnNothing) {
  StepAgreement mine;
  mine.sums = {std::numeric_limits<double>::quiet_NaN()};  // sums travel as they are
  const StepAgreement all = agree_step(mine, MPI_COMM_WORLD);
  EXPECT_TRUE(std::isnan(all.sums[0]));
  EXPECT_EQ(all.oom_rank, -1);
  EXPECT_EQ(all.oom_peak, 0);
  EXPECT_EQ(all.nonfinite_rank, -1);
  EXPECT_FALSE(all.stop);
  EXPECT_FALSE(all.checkpoint_writing);
  EXPECT_FALSE(all.out_of_memory());
}
