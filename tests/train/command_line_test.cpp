// The trainers' shared command line (read_command_line): options on either side of the
// topology file, one value per --set, and the commands that only print.
#include <gtest/gtest.h>

#include <regex>
#include <vector>

#include "topotrain/core/run_file.h"
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

// --print-settings: every key the job reads, resolved, as TOML that a --config file can be;
// moe_train's without the DFlash drafter's keys. No mpirun needed.
TEST(CommandLine, PrintSettingsPrintsTheJobsOwnKeysAsToml) {
  const std::string cpu4 = std::string(TOPOTRAIN_SOURCE_DIR) + "/topology/cpu4.toml";
  const std::string cpu_1t1d = std::string(TOPOTRAIN_SOURCE_DIR) + "/topology/cpu-1t1d.toml";
  const CommandLine moe = read({cpu4.c_str(), "--print-settings", "--set", "train.lr=7e-4"});
  ASSERT_EQ(moe.exit_code, 0) << moe.error;
  const char* args[] = {"dflash_train", cpu_1t1d.c_str(), "--print-settings"};
  const CommandLine dflash = read_command_line(3, args, dflash_job());
  ASSERT_EQ(dflash.exit_code, 0) << dflash.error;
  for (const SettingSpec& spec : setting_specs()) {
    const std::string name = spec.key.substr(spec.key.find('.') + 1);
    const std::regex line("(^|\n)(# )?" + name + " (=|is unset)");
    EXPECT_EQ(std::regex_search(moe.output, line), spec.job != "dflash_train") << spec.key;
    EXPECT_EQ(std::regex_search(dflash.output, line), spec.job != "moe_train") << spec.key;
  }
  EXPECT_NE(moe.output.find("lr = 0.0007  # --set\n"), std::string::npos) << moe.output;
  Settings parsed;
  merge_settings(moe.output, "printed", parsed);
  EXPECT_DOUBLE_EQ(parsed.real("train.lr"), 7e-4);
  EXPECT_EQ(parsed.integer("train.token_budget"), 1024);  // the topology's
  // A key the job does not read is refused as a launch refuses it.
  const CommandLine refused = read({cpu4.c_str(), "--print-settings", "--set", "train.anchors=3"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.error.find("train.anchors is a dflash_train setting"), std::string::npos) << refused.error;
}
