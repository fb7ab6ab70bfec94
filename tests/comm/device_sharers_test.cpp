#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include <vector>

#include "topotrain/comm/device_sharers.h"

using namespace topotrain::comm;

// On CPU a rank's memory is its node's, and every rank of these tests runs on one node: the
// sharers are the whole group, whatever order the group numbers them in, and the first of
// them is the group's rank 0 (here the highest world rank of each half).
TEST(DeviceSharers, CpuRanksOfOneNodeShareAndNameTheGroupsFirstRank) {
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_size - world_rank, &half);
  int half_rank = 0, half_size = 0;
  MPI_Comm_rank(half, &half_rank);
  MPI_Comm_size(half, &half_size);
  {
    const DeviceSharers sharers(half, torch::Device(torch::kCPU));
    EXPECT_EQ(sharers.size(), half_size);
    EXPECT_EQ(sharers.rank(), half_rank);
    std::vector<int> all(static_cast<std::size_t>(half_size));
    for (int r = 0; r < half_size; ++r) all[static_cast<std::size_t>(r)] = r;
    EXPECT_EQ(sharers.group_ranks(), all);
    EXPECT_EQ(sharers.sum(world_rank), [&] {
      std::int64_t expected = 0;
      for (int r = world_rank % 2; r < world_size; r += 2) expected += r;
      return expected;
    }());
  }
  const DeviceSharers everyone(MPI_COMM_WORLD, torch::Device(torch::kCPU));
  EXPECT_EQ(everyone.size(), world_size);
  ASSERT_EQ(everyone.group_ranks().size(), static_cast<std::size_t>(world_size));
  EXPECT_EQ(everyone.group_ranks().front(), 0);
  EXPECT_EQ(everyone.group_ranks().back(), world_size - 1);
  MPI_Comm_free(&half);
}
