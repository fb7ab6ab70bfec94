// What a launch writes and prints at its start: settings.toml per launch (launch_settings.h)
// and the start block (start_block.h).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "topotrain/core/files.h"
#include "topotrain/core/run_file.h"
#include "topotrain/core/settings.h"
#include "topotrain/train/launch_settings.h"
#include "topotrain/train/start_block.h"

using namespace topotrain;

namespace {

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

// settings.toml is the newest launch's, with every key the job reads, and TOML that
// --config takes; an earlier launch's file is kept under its launch's number.
TEST(LaunchSettings, NewestLaunchInSettingsTomlEarlierOnesKept) {
  const std::string root = make_temp_directory("topotrain-launch-");
  const std::string dir = join_path(root, "run");  // made by the first write
  Settings first;
  first.set_from_assignment("train.max_steps=3");
  const std::string path = write_launch_settings(dir, 1, "moe_train", first.to_toml("moe_train"));
  EXPECT_EQ(path, join_path(dir, "settings.toml"));
  Settings second = first;
  second.set_from_assignment("train.max_steps=6");
  write_launch_settings(dir, 3, "moe_train", second.to_toml("moe_train"));
  const std::string newest = text_of(path);
  EXPECT_EQ(newest.rfind("# moe_train launch 3: ", 0), 0u) << newest;
  EXPECT_EQ(text_of(join_path(dir, "settings.launch-1.toml")).rfind("# moe_train launch 1: ", 0), 0u);
  Settings parsed;
  merge_settings(newest, path, parsed);
  EXPECT_EQ(parsed.integer("train.max_steps"), 6);
  for (const SettingSpec& spec : setting_specs()) {
    const std::string name = spec.key.substr(spec.key.find('.') + 1);
    const bool listed = newest.find("\n" + name + " = ") != std::string::npos ||
                        newest.find("\n# " + name + " is unset") != std::string::npos;
    EXPECT_EQ(listed, spec.job != "dflash_train") << spec.key;
  }
  remove_tree(root);
}

TEST(StartBlock, ShortLinesOfWhatTheLaunchIs) {
  StartBlock block;
  block.job = "moe_train";
  block.launch = 2;
  block.run_dir = "/ckpt/cpu4";
  block.resumed_from = "/ckpt/cpu4/step-00000040.h5";
  block.resumed_step = 40;
  block.lines = {{"model", "m"}, {"budget", "4 ranks"}, {"settings", "/ckpt/cpu4/settings.toml"}};
  EXPECT_EQ(start_block_lines(block),
            (std::vector<std::string>{"moe_train launch 2 of /ckpt/cpu4, resumed from /ckpt/cpu4/step-00000040.h5 "
                                      "(step 40)",
                                      "  model     m", "  budget    4 ranks", "  settings  /ckpt/cpu4/settings.toml"}));
  block.resumed_from.clear();
  EXPECT_EQ(start_block_lines(block).front(), "moe_train launch 2 of /ckpt/cpu4, fresh");
  EXPECT_EQ(count_text(41184), "41.2K");
  EXPECT_EQ(count_text(227000), "227K");
  EXPECT_EQ(count_text(523.4e6), "523M");
  EXPECT_EQ(count_text(8.19e9), "8.19B");
  EXPECT_EQ(count_text(12), "12");
  EXPECT_EQ(model_text(model::ModelConfig::preset("tiny-dense")).find("model preset 'tiny-dense' (Qwen3 dense, "), 0u);
  EXPECT_NE(model_text(model::ModelConfig::preset("tiny-moe")).find(" active per token"), std::string::npos);
}
