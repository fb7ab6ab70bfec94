// RUN_DIR/settings.toml: every setting the job reads, resolved, as the run's newest launch
// ran with them (Settings::to_toml(job): a non-default value's comment says where it came
// from), headed by the launch's number. A launch prints a short start block instead of
// them (start_block.h); this file, `--print-settings` and `--dry-run` give them all.
//
// One file a user opens, and hands to `--config` as it is: the newest launch's. The file an
// earlier launch left is kept beside it as settings.launch-N.toml (N: that launch's
// number), so that every launch's settings stay readable; the checkpoints store theirs too.
#pragma once

#include <string>

namespace topotrain {

constexpr const char* kSettingsFileName = "settings.toml";

// Writes `toml` as <run_dir>/settings.toml for `job`'s launch `launch`, after moving an
// earlier launch's file aside (named by the number in its first line; settings.earlier.toml
// where it has none). Returns the path written. Throws std::runtime_error naming the file.
std::string write_launch_settings(const std::string& run_dir, int launch, const std::string& job,
                                  const std::string& toml);

}  // namespace topotrain
