// The trainers' shared command line (read_command_line): options on either side of the
// topology file, one value per --set, and the commands that only print.
#include <gtest/gtest.h>

#include <regex>
#include <vector>

#include "topotrain/core/settings.h"
#include "topotrain/core/topology.h"
#include "topotrain/train/job.h"
#include "topotrain/train/dflash_trainer.h"
#include "topotrain/train/moe_trainer.h"

using namespace topotrain;

namespace {

CommandLine read(std::vector<const char*> args) {
  args.insert(args.begin(), "moe_train");
  return read_command_line(static_cast<int>(args.size()), args.data(), moe_job());
}

}  // namespace

TEST(CommandLine, OptionsMayComeBeforeTheTopologyFile) {
  CommandLine line = read({"--set", "train.max_steps=3", "--set", "train.lr = 7e-4", "--config", "a.toml",
                           "topology/cpu4.toml", "--dry-run", "--set", "log.every=1"});
  ASSERT_FALSE(line.exit_code) << line.error;
  EXPECT_EQ(line.options.topology_path, "topology/cpu4.toml");
  EXPECT_EQ(line.options.overrides, (std::vector<std::string>{"train.max_steps=3", "train.lr = 7e-4", "log.every=1"}));
  EXPECT_EQ(line.options.config_paths, (std::vector<std::string>{"a.toml"}));
  EXPECT_TRUE(line.options.dry_run);
  line = read({"--set=train.seed=5", "topology/cpu4.toml"});
  ASSERT_FALSE(line.exit_code) << line.error;
  EXPECT_EQ(line.options.overrides, (std::vector<std::string>{"train.seed=5"}));
  EXPECT_EQ(line.options.topology_path, "topology/cpu4.toml");
}

TEST(CommandLine, MissingTopologyOrExtraArgumentsExitTwo) {
  CommandLine line = read({"--set", "train.max_steps=3"});
  EXPECT_EQ(line.exit_code, 2);
  EXPECT_NE(line.error.find("topology"), std::string::npos) << line.error;
  EXPECT_EQ(read({"topology/cpu4.toml", "topology/cpu-1t1d.toml"}).exit_code, 2);
  EXPECT_EQ(read({"topology/cpu4.toml", "--no-such-option"}).exit_code, 2);
}

TEST(CommandLine, VersionNamesTopotrainAndWhatItWasBuiltWith) {
  const CommandLine line = read({"--version"});
  EXPECT_EQ(line.exit_code, 0);
  EXPECT_TRUE(std::regex_search(line.output, std::regex(R"(^topotrain \d+\.\d+\.\d+\nbuilt with LibTorch \d)")))
      << line.output;
#ifdef TOPOTRAIN_CUDA
  EXPECT_NE(line.output.find(", CUDA "), std::string::npos) << line.output;
  EXPECT_NE(line.output.find(", NCCL "), std::string::npos) << line.output;
#else
  EXPECT_NE(line.output.find(", no CUDA, no NCCL\n"), std::string::npos) << line.output;
#endif
}

TEST(CommandLine, HelpSettingsPrintsTheReference) {
  const CommandLine line = read({"--help-settings"});
  EXPECT_EQ(line.exit_code, 0);
  EXPECT_NE(line.output.find("train.schedule"), std::string::npos);
  EXPECT_NE(line.output.find("tokens | steps"), std::string::npos);
  EXPECT_EQ(read({"--help"}).exit_code, 0);
}

// Each job lists the keys it reads: moe_train not the DFlash drafter's.
TEST(CommandLine, HelpSettingsListsTheJobsOwnKeys) {
  const char* args[] = {"dflash_train", "--help-settings"};
  const std::string dflash = read_command_line(2, args, dflash_job()).output;
  const std::string moe = read({"--help-settings"}).output;
  EXPECT_NE(moe.find("Run settings of moe_train"), std::string::npos) << moe;
  for (const SettingSpec& spec : setting_specs()) {
    EXPECT_EQ(dflash.find("  " + spec.key + " ") != std::string::npos, spec.job != "moe_train") << spec.key;
    EXPECT_EQ(moe.find("  " + spec.key + " ") != std::string::npos, spec.job != "dflash_train") << spec.key;
  }
  EXPECT_EQ(moe.find("train.anchors"), std::string::npos);
  EXPECT_NE(dflash.find("train.oom"), std::string::npos);
  EXPECT_NE(moe.find("train.token_budget"), std::string::npos);
  EXPECT_NE(dflash.find("train.anchors"), std::string::npos);
}
