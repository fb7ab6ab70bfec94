#include <gtest/gtest.h>

#include "../config_error_text.h"
#include "../source_text.h"
#include "topotrain/core/run_file.h"
#include "topotrain/core/topology.h"
#include "topotrain/core/topology_split.h"

using namespace topotrain;
using topotrain::test_support::config_error_of;
using topotrain::test_support::read_source_file;

namespace {

// dflash_train's roles (train/dflash_trainer.cpp), without linking the trainers.
const JobSpec kDflashRoles{"dflash_train", {"target", "drafter"}, {"target", "drafter"}};

Topology resplit_and_parse(const std::string& file, int targets, int drafters) {
  const std::string text = resplit_topology(read_source_file(file), file, targets, drafters);
  Topology topology = parse_topology(text, file + " re-split");
  validate_topology(topology, kDflashRoles);
  return topology;
}

}  // namespace

TEST(TopologySplit, CpuSevenToOneBecomesFiveToThreeKeepingEveryOtherTable) {
  const std::string original = read_source_file("topology/cpu-7t1d.toml");
  const std::string text = resplit_topology(original, "cpu-7t1d.toml", 5, 3);
  const Topology t = parse_topology(text, "re-split");
  validate_topology(t, kDflashRoles);
  EXPECT_EQ(t.find_role("target")->ranks, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(t.find_role("drafter")->ranks, (std::vector<int>{5, 6, 7}));
  EXPECT_TRUE(t.find_role("target")->all_cpu);
  EXPECT_TRUE(t.find_role("drafter")->all_cpu);
  EXPECT_EQ(t.name, "cpu-5t3d");
  EXPECT_EQ(t.interconnect, Interconnect::cpu);
  EXPECT_EQ(t.links.queue_depth, 4);
  // The settings tables and their comments are carried as written.
  const std::string model = original.substr(original.find("[model]"));
  EXPECT_NE(text.find(model), std::string::npos) << text;
  // Targets are dealt round-robin over the new drafters.
  EXPECT_EQ(t.drafter_of(0), 5);
  EXPECT_EQ(t.drafter_of(4), 6);
  EXPECT_EQ(t.targets_of(7), (std::vector<int>{2}));
}

TEST(TopologySplit, EveryRankKeepsItsGpu) {
  const Topology t = resplit_and_parse("topology/7t1d.toml", 6, 2);
  ASSERT_EQ(t.find_role("target")->devices.size(), 6u);
  for (int rank = 0; rank < 8; ++rank) EXPECT_EQ(t.device_of(rank, 0), Device::cuda(rank)) << rank;
  EXPECT_EQ(t.name, "6t2d");
  EXPECT_EQ(t.interconnect, Interconnect::pcie5);
}

TEST(TopologySplit, RouteIsDroppedForRoundRobin) {
  const std::string original = read_source_file("topology/cpu-2t2d.toml");
  ASSERT_FALSE(parse_topology(original, "cpu-2t2d.toml").find_role("target")->route.empty());
  const Topology t = resplit_and_parse("topology/cpu-2t2d.toml", 3, 1);
  EXPECT_TRUE(t.find_role("target")->route.empty());
  EXPECT_EQ(t.targets_of(3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(t.name, "cpu-3t1d");
}

TEST(TopologySplit, DraftersListedAtTheLowRanksKeepThem) {
  const std::string text =
      "[topology]\nname = \"mine\"\ninterconnect = \"nvlink\"\n"
      "[[roles]]\nrole = \"drafter\"\nranks = [0]\ndevices = [3]\n\n"
      "# the targets\n[[roles]]\nrole = \"target\"\nranks = [1, 2, 3]\ndevices = [2, 1, 0]\n\n"
      "# links follow\n[links]\nqueue_depth = 8\n";
  const Topology t = parse_topology(resplit_topology(text, "mine.toml", 2, 2), "re-split");
  validate_topology(t, kDflashRoles);
  EXPECT_EQ(t.find_role("drafter")->ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(t.find_role("target")->ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(t.device_of(0, 0), Device::cuda(3));
  EXPECT_EQ(t.device_of(1, 0), Device::cuda(2));
  EXPECT_EQ(t.device_of(3, 0), Device::cuda(0));
  EXPECT_EQ(t.name, "mine");
  EXPECT_EQ(t.links.queue_depth, 8);
  EXPECT_NE(resplit_topology(text, "mine.toml", 2, 2).find("# links follow\n[links]"), std::string::npos);
}

TEST(TopologySplit, RefusesWhatCannotBeCarriedOver) {
  const std::string dflash = read_source_file("topology/cpu-7t1d.toml");
  EXPECT_NE(config_error_of([&] { resplit_topology(dflash, "cpu-7t1d.toml", 7, 2); })
                .find("cpu-7t1d.toml: cannot split its 8 ranks into 7 target(s) and 2 drafter(s)"),
            std::string::npos);
  EXPECT_NE(config_error_of([&] { resplit_topology(dflash, "cpu-7t1d.toml", 8, 0); }).find("at least 1"),
            std::string::npos);
  // A target streams to one drafter: 3t5d would leave two drafters without one.
  EXPECT_NE(config_error_of([&] { resplit_topology(dflash, "cpu-7t1d.toml", 3, 5); })
                .find("every drafter needs a target of its own (at most 4 drafters)"),
            std::string::npos);
  EXPECT_NE(config_error_of([&] { resplit_topology(read_source_file("topology/cpu4.toml"), "cpu4.toml", 2, 2); })
                .find("cpu4.toml: not a DFlash topology"),
            std::string::npos);
  const std::string mixed =
      "[topology]\nname = \"m\"\ninterconnect = \"pcie4\"\n[[roles]]\nrole = \"target\"\nranks = [0, 1]\n"
      "devices = [0, 1]\n[[roles]]\nrole = \"drafter\"\nranks = [2]\n";
  EXPECT_NE(config_error_of([&] { resplit_topology(mixed, "m.toml", 2, 1); }).find("m.toml: its target and drafter roles place"),
            std::string::npos);
}
