#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "topotrain/core/error.h"
#include "topotrain/core/run_file.h"
#include "topotrain/core/topology.h"
#include "topotrain/core/visible_devices.h"
#include "topotrain/train/dflash_trainer.h"
#include "topotrain/train/moe_trainer.h"

using namespace topotrain;

namespace {

std::string read(const std::string& relative) {
  std::ifstream in(std::string(TOPOTRAIN_SOURCE_DIR) + "/" + relative);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The message of the ConfigError that `fn` raises ("" if none).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

Topology parse(const std::string& text) { return parse_topology(text, "t.toml"); }

const char* kTwoTrainers = R"([topology]
name = "two"
interconnect = "cpu"
[[roles]]
role = "trainer"
ranks = [0, 1]
)";

}  // namespace

TEST(Topology, ShippedFilesAreValidForTheirJobs) {
  for (const char* file : {"topology/pcie4x4.toml", "topology/cpu4.toml"}) {
    Topology t = parse_topology(read(file), file);
    EXPECT_NO_THROW(validate_topology(t, moe_job())) << file;
    EXPECT_EQ(t.ranks_listed(), 4) << file;
  }
  for (const char* file : {"topology/7t1d.toml", "topology/2t2d.toml", "topology/1t1d.toml", "topology/cpu-7t1d.toml",
                           "topology/cpu-2t2d.toml", "topology/cpu-1t1d.toml"}) {
    Topology t = parse_topology(read(file), file);
    EXPECT_NO_THROW(validate_topology(t, dflash_job())) << file;
  }
}

TEST(Topology, SevenTargetsFeedOneDrafter) {
  Topology t = parse_topology(read("topology/7t1d.toml"), "7t1d.toml");
  EXPECT_EQ(t.interconnect, Interconnect::pcie5);
  EXPECT_EQ(t.links.queue_depth, 20);
  for (int target = 0; target < 7; ++target) EXPECT_EQ(t.drafter_of(target), 7);
  EXPECT_EQ(t.targets_of(7), (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(t.device_of(7, 0), Device::cuda(7));
}

TEST(Topology, TwoTargetsRouteOneToOne) {
  Topology t = parse_topology(read("topology/2t2d.toml"), "2t2d.toml");
  EXPECT_EQ(t.drafter_of(0), 2);
  EXPECT_EQ(t.drafter_of(1), 3);
  EXPECT_EQ(t.targets_of(3), std::vector<int>{1});
}

TEST(Topology, DefaultDeviceIsLocalRankOrCpu) {
  Topology gpu = parse("[topology]\ninterconnect = \"pcie4\"\n[[roles]]\nrole = \"trainer\"\nranks = [0, 1]\n");
  EXPECT_EQ(gpu.device_of(1, 1), Device::cuda(1));
  Topology cpu = parse(kTwoTrainers);
  EXPECT_TRUE(cpu.device_of(1, 1).is_cpu);
  EXPECT_EQ(cpu.name, "two");
}

TEST(Topology, WorldSizeMismatchNamesTheRightNp) {
  Topology t = parse(kTwoTrainers);
  std::string message = error_of([&] { validate_world(t, 3); });
  EXPECT_NE(message.find("lists 2 ranks but the job was launched with 3"), std::string::npos) << message;
  EXPECT_NE(message.find("mpirun -np 2"), std::string::npos) << message;
  EXPECT_EQ(error_of([&] { validate_world(t, 2); }), "");
}

TEST(Topology, RankInTwoRoles) {
  Topology t = parse("[[roles]]\nrole = \"target\"\nranks = [0, 1]\n[[roles]]\nrole = \"drafter\"\nranks = [1]\n");
  std::string message = error_of([&] { validate_topology(t, dflash_job()); });
  EXPECT_NE(message.find("rank 1 is listed in role \"target\" and again in role \"drafter\""), std::string::npos)
      << message;
}

TEST(Topology, RankInNoRole) {
  Topology t = parse("[[roles]]\nrole = \"trainer\"\nranks = [0, 2]\n");
  std::string message = error_of([&] { validate_topology(t, moe_job()); });
  EXPECT_NE(message.find("rank 1 is in no role"), std::string::npos) << message;
}

TEST(Topology, UnknownRoleForJobSuggestsNearest) {
  Topology t = parse("[[roles]]\nrole = \"trainr\"\nranks = [0]\n");
  std::string message = error_of([&] { validate_topology(t, moe_job()); });
  EXPECT_NE(message.find("role = \"trainr\" is not a role of moe_train (did you mean 'trainer'?)"),
            std::string::npos)
      << message;
  Topology dflash = parse_topology(read("topology/cpu-7t1d.toml"), "cpu-7t1d.toml");
  EXPECT_NE(error_of([&] { validate_topology(dflash, moe_job()); }).find("not a role of moe_train"),
            std::string::npos);
}

TEST(Topology, TargetsWithoutDrafter) {
  Topology t = parse("[[roles]]\nrole = \"target\"\nranks = [0, 1]\n");
  std::string message = error_of([&] { validate_topology(t, dflash_job()); });
  EXPECT_NE(message.find("needs a [[roles]] entry with role = \"drafter\""), std::string::npos) << message;
}

TEST(Topology, RouteToMissingRank) {
  Topology t = parse(
      "[[roles]]\nrole = \"target\"\nranks = [0, 1]\nroute = [2, 5]\n[[roles]]\nrole = \"drafter\"\nranks = [2, 3]\n");
  std::string message = error_of([&] { validate_topology(t, dflash_job()); });
  EXPECT_NE(message.find("target rank 1 routes to rank 5, which is not a drafter rank"), std::string::npos)
      << message;
}

TEST(Topology, DrafterFedByNoTarget) {
  Topology t = parse(
      "[[roles]]\nrole = \"target\"\nranks = [0, 1]\nroute = [2, 2]\n[[roles]]\nrole = \"drafter\"\nranks = [2, 3]\n");
  std::string message = error_of([&] { validate_topology(t, dflash_job()); });
  EXPECT_NE(message.find("drafter rank 3 is fed by no target"), std::string::npos) << message;
}

TEST(Topology, DeviceBeyondGpusPresent) {
  Topology t = parse("[[roles]]\nrole = \"trainer\"\nranks = [0, 1]\ndevices = [0, 3]\n");
  EXPECT_EQ(error_of([&] { validate_device(t, 0, 0, 2); }), "");
  std::string message = error_of([&] { validate_device(t, 1, 1, 2); });
  EXPECT_NE(message.find("rank 1 (trainer) is placed on cuda:3 but this process sees 2 GPUs (0..1)"),
            std::string::npos)
      << message;
  std::string none = error_of([&] { validate_device(t, 0, 0, 0); });
  EXPECT_NE(none.find("no usable GPU"), std::string::npos) << none;
  Topology cpu = parse(kTwoTrainers);
  EXPECT_EQ(error_of([&] { validate_device(cpu, 1, 1, 0); }), "");
}

// A launcher that shows each process only its GPU (CUDA_VISIBLE_DEVICES with one entry):
// the process's one device is the rank's, whatever number the topology gives it. Two
// visible GPUs are numbered as the process sees them, and the message says what it sees.
TEST(Topology, OneVisibleGpuPerProcessIsTheRanksDevice) {
  Topology t = parse("[[roles]]\nrole = \"trainer\"\nranks = [0, 1]\ndevices = [0, 3]\n");
  EXPECT_EQ(error_of([&] { validate_device(t, 1, 1, 1, "3"); }), "");
  EXPECT_EQ(error_of([&] { validate_device(t, 1, 1, 1, "GPU-8f2c1a7e-uuid"); }), "");
  std::string two = error_of([&] { validate_device(t, 1, 1, 2, "2,3"); });
  EXPECT_NE(two.find("this process sees 2 GPUs (0..1) (CUDA_VISIBLE_DEVICES=2,3)"), std::string::npos) << two;
  std::string hidden = error_of([&] { validate_device(t, 0, 0, 0, ""); });
  EXPECT_NE(hidden.find("no usable GPU (CUDA_VISIBLE_DEVICES=)"), std::string::npos) << hidden;
  EXPECT_EQ(cuda_ordinal(3, 1, "3"), 0);
  EXPECT_EQ(cuda_ordinal(3, 1, "0"), 0);  // a cgroup-confined task
  EXPECT_EQ(cuda_ordinal(1, 4, nullptr), 1);
  EXPECT_EQ(cuda_ordinal(1, 4, "0,1,2,3"), 1);
  EXPECT_EQ(cuda_ordinal(3, 1, nullptr), std::nullopt);  // one GPU, but nobody chose it for this rank
  EXPECT_EQ(cuda_ordinal(0, 0, "0"), std::nullopt);
  EXPECT_FALSE(one_visible_device(""));
  EXPECT_FALSE(one_visible_device("1,2"));
}

TEST(Topology, DeviceCountMustMatchRanks) {
  Topology t = parse("[[roles]]\nrole = \"trainer\"\nranks = [0, 1]\ndevices = [0]\n");
  EXPECT_NE(error_of([&] { validate_topology(t, moe_job()); }).find("has 2 ranks but 1 devices"), std::string::npos);
}

TEST(Topology, MalformedTomlNamesFileLineAndColumn) {
  std::string message = error_of([] { parse("[topology]\nname = \"x\"\n[[roles]\nrole = 1\n"); });
  EXPECT_NE(message.find("t.toml:3:"), std::string::npos) << message;
  EXPECT_NE(message.find("malformed TOML"), std::string::npos) << message;
}

TEST(Topology, WrongValueTypesNameTheLine) {
  std::string ranks = error_of([] { parse("[[roles]]\nrole = \"trainer\"\nranks = \"0,1\"\n"); });
  EXPECT_NE(ranks.find("t.toml:3:"), std::string::npos) << ranks;
  EXPECT_NE(ranks.find("'ranks' must be a list of integers"), std::string::npos) << ranks;
  std::string interconnect =
      error_of([] { parse("[topology]\ninterconnect = \"pcie6\"\n[[roles]]\nrole = \"trainer\"\nranks = [0]\n"); });
  EXPECT_NE(interconnect.find("interconnect = \"pcie6\" is not one of pcie4 | pcie5 | nvlink | cpu"),
            std::string::npos)
      << interconnect;
}

TEST(Topology, UnknownKeysAndTablesSuggestNearest) {
  std::string key = error_of([] { parse("[[roles]]\nrole = \"trainer\"\nrank = [0]\n"); });
  EXPECT_NE(key.find("unknown key 'rank' in [[roles]] (did you mean 'ranks'?)"), std::string::npos) << key;
  std::string table = error_of([] { parse("[trian]\nlr = 1\n[[roles]]\nrole = \"trainer\"\nranks = [0]\n"); });
  EXPECT_NE(table.find("unknown table or key 'trian' (did you mean 'train'?)"), std::string::npos) << table;
  std::string links = error_of(
      [] { parse("[links]\nhidden_state = \"ipc\"\n[[roles]]\nrole = \"trainer\"\nranks = [0]\n"); });
  EXPECT_NE(links.find("did you mean 'hidden_states'?"), std::string::npos) << links;
}

TEST(Topology, FanInIsArrivalUnlessRoundRobinIsAsked) {
  EXPECT_EQ(parse_topology(read("topology/7t1d.toml"), "7t1d.toml").links.fan_in, FanIn::arrival);
  const Topology t = parse("[links]\nfan_in = \"round_robin\"\n[[roles]]\nrole = \"trainer\"\nranks = [0]\n");
  EXPECT_EQ(t.links.fan_in, FanIn::round_robin);
  std::string wrong = error_of([] { parse("[links]\nfan_in = \"robin\"\n[[roles]]\nrole = \"trainer\"\nranks = [0]\n"); });
  EXPECT_NE(wrong.find("fan_in = \"robin\" is not one of arrival | round_robin"), std::string::npos) << wrong;
}

TEST(Topology, MissingFileIsAClearError) {
  std::string message = error_of([] { load_run("no/such.toml", {}, {}); });
  EXPECT_NE(message.find("cannot open topology file 'no/such.toml'"), std::string::npos) << message;
}

TEST(Topology, ARoleInTwoTablesIsRefused) {
  struct Case {
    const char* role;
    const char* rest;  // the job's other required role
    const JobSpec& job;
  };
  for (const Case& c : {Case{"trainer", "", moe_job()},
                        Case{"target", "[[roles]]\nrole = \"drafter\"\nranks = [2]\n", dflash_job()},
                        Case{"drafter", "[[roles]]\nrole = \"target\"\nranks = [2]\n", dflash_job()}}) {
    const std::string text =
        cat("[[roles]]\nrole = \"", c.role, "\"\nranks = [0]\n[[roles]]\nrole = \"", c.role, "\"\nranks = [1]\n", c.rest);
    const std::string message = error_of([&] { validate_topology(parse(text), c.job); });
    EXPECT_NE(message.find(cat("two [[roles]] tables have role = \"", c.role, "\"")), std::string::npos)
        << c.role << ": " << message;
  }
}

TEST(Topology, IntegersOutsideIntAreRefusedNotWrapped) {
  EXPECT_NE(error_of([] { parse("[[roles]]\nrole = \"trainer\"\nranks = [0, 4294967297]\n"); })
                .find("t.toml:3:13: 'ranks' = 4294967297 is out of range; use 0 .. 2147483647"),
            std::string::npos);
  for (const char* depth : {"4294967297", "2147483648", "0", "-3"}) {
    EXPECT_NE(error_of([&] { parse(cat(kTwoTrainers, "[links]\nqueue_depth = ", depth, "\n")); })
                  .find(cat("'queue_depth' = ", depth, " is out of range; use 1 .. 2147483647")),
              std::string::npos)
        << depth;
  }
  EXPECT_NE(error_of([] { parse("[[roles]]\nrole = \"trainer\"\nranks = [0]\ndevices = [-1]\n"); })
                .find("'devices' = -1 is out of range"),
            std::string::npos);
  EXPECT_EQ(parse(cat(kTwoTrainers, "[links]\nqueue_depth = 2147483647\n")).links.queue_depth, 2147483647);
}

TEST(Topology, AConfigPathThatIsADirectoryIsRefused) {
  const std::string topology = std::string(TOPOTRAIN_SOURCE_DIR) + "/topology/cpu4.toml";
  EXPECT_NE(error_of([&] { load_run(topology, {TOPOTRAIN_SOURCE_DIR}, {}); })
                .find(cat("config file '", TOPOTRAIN_SOURCE_DIR, "' is a directory")),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_run(TOPOTRAIN_SOURCE_DIR, {}, {}); }).find("is a directory"), std::string::npos);
}

// A key no known key is near: the message lists what the table takes.
TEST(Topology, UnknownKeyWithoutANearOneListsTheTablesKeys) {
  const std::string message = error_of([] {
    parse("[[roles]]\nrole = \"trainer\"\nranks = [0]\n[links]\nqdepth = 3\n");
  });
  EXPECT_NE(message.find("t.toml:5:10: unknown key 'qdepth' in [links]; [links] takes hidden_states, queue_depth, "
                         "fan_in"),
            std::string::npos)
      << message;
}

// devices takes a list of GPU ordinals or the word "cpu": a list of words names both forms.
TEST(Topology, DevicesOfWordsNameTheCpuForm) {
  const std::string message = error_of([] {
    parse("[[roles]]\nrole = \"trainer\"\nranks = [0]\ndevices = [\"cpu\"]\n");
  });
  EXPECT_NE(message.find("'devices' must be a list of integers, e.g. [0, 1], or \"cpu\""), std::string::npos)
      << message;
}
