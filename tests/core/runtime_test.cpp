#include <gtest/gtest.h>

#include <mpi.h>

#include "topotrain/core/error.h"
#include "topotrain/core/run_file.h"
#include "topotrain/core/runtime.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/train/dflash_trainer.h"

using namespace topotrain;

namespace {

// Runtime owns MPI_Init/Finalize in production; here mpi_main.cpp owns them, so the
// tests share one Runtime that must not finalize early: it is never destroyed.
Runtime& runtime() {
  static Runtime* rt = new Runtime(nullptr, nullptr);
  return *rt;
}

// A topology for the launched world size: the last rank drafts, the others are targets.
Topology pipeline_topology(int world) {
  std::string ranks;
  for (int r = 0; r + 1 < world; ++r) ranks += (r ? ", " : "") + std::to_string(r);
  return parse_topology(cat("[topology]\ninterconnect = \"cpu\"\n[[roles]]\nrole = \"target\"\nranks = [", ranks,
                            "]\n[[roles]]\nrole = \"drafter\"\nranks = [", world - 1, "]\n"),
                        "pipeline.toml");
}

}  // namespace

TEST(Runtime, KnowsRankSizeAndNode) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(runtime().rank(), rank);
  EXPECT_EQ(runtime().world_size(), size);
  // One node in tests: node-local rank equals world rank.
  EXPECT_EQ(runtime().local_rank(), rank);
  EXPECT_EQ(runtime().local_size(), size);
  EXPECT_FALSE(runtime().host().empty());
}

TEST(Runtime, BindSplitsOneCommunicatorPerRole) {
  Runtime& rt = runtime();
  Topology topology = pipeline_topology(rt.world_size());
  validate_topology(topology, dflash_job());
  validate_world(topology, rt.world_size());
  rt.bind(topology);
  bool drafter = rt.rank() == rt.world_size() - 1;
  EXPECT_EQ(rt.role(), drafter ? "drafter" : "target");
  EXPECT_EQ(rt.role_size(), drafter ? 1 : rt.world_size() - 1);
  EXPECT_EQ(rt.role_rank(), drafter ? 0 : rt.rank());
  EXPECT_TRUE(rt.device().is_cpu);
  // The role communicator reduces over its own role only.
  int one = 1, members = 0;
  MPI_Allreduce(&one, &members, 1, MPI_INT, MPI_SUM, rt.role_comm());
  EXPECT_EQ(members, rt.role_size());
}

TEST(Runtime, FirstErrorReachesEveryRank) {
  Runtime& rt = runtime();
  EXPECT_EQ(rt.first_error(""), "");
  // Ranks 1 and up fail; every rank must get rank 1's message.
  std::string mine = rt.rank() >= 1 ? cat("bad input on rank ", rt.rank()) : "";
  std::string first = rt.first_error(mine);
  EXPECT_EQ(first, "bad input on rank 1");
}

// Over a group (here the odd and the even ranks), the group's own lowest failing rank: the
// ranks of one group never see the other's message.
TEST(Runtime, FirstErrorOfAGroupIsThatGroupsLowest) {
  Runtime& rt = runtime();
  MPI_Comm half;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, rt.rank() % 2, rt.rank(), &half), MPI_SUCCESS);
  // Every rank but world rank 0 and 1 fails: the evens get rank 2's, the odds rank 3's.
  const std::string mine = rt.rank() >= 2 ? cat("bad input on rank ", rt.rank()) : "";
  const std::string first = rt.first_error(mine, half);
  const int lowest = rt.rank() % 2 + 2;
  EXPECT_EQ(first, lowest < rt.world_size() ? cat("bad input on rank ", lowest) : "");
  MPI_Comm_free(&half);
}

TEST(Runtime, FirstFailureCarriesThatRanksCode) {
  Runtime& rt = runtime();
  EXPECT_EQ(rt.first_failure({}).code, 0);
  // The last rank fails with 4, ranks 1.. before it with 3: every rank gets rank 1's outcome
  // (the last one's when it is rank 1 or the only one).
  const int last = rt.world_size() - 1;
  Runtime::Outcome mine;
  if (rt.rank() >= 1) mine = {rt.rank() == last ? 4 : 3, cat("failed on rank ", rt.rank())};
  const Runtime::Outcome first = rt.first_failure(mine);
  if (rt.world_size() == 1) {
    EXPECT_EQ(first.code, 0);
  } else {
    EXPECT_EQ(first.code, last == 1 ? 4 : 3);
    EXPECT_EQ(first.message, "failed on rank 1");
  }
}

TEST(Runtime, StopAgreedWhenAnyRankIsSignalled) {
  Runtime& rt = runtime();
  clear_stop();
  EXPECT_FALSE(rt.agree_stop());
  if (rt.rank() == rt.world_size() - 1) request_stop();
  EXPECT_TRUE(rt.agree_stop());
  clear_stop();
}

TEST(Runtime, PlacementTableListsEveryRankOnRankZero) {
  Runtime& rt = runtime();
  std::string table = rt.placement_table();
  if (rt.rank() != 0) {
    EXPECT_EQ(table, "");
    return;
  }
  for (int r = 0; r < rt.world_size(); ++r)
    EXPECT_NE(table.find(cat("\n", r, "\t")), std::string::npos) << table;
}
