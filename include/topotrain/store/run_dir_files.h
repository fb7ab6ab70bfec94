// Names of the files inside a run directory (checkpoints, timings.h5) and the atomic file
// operations the checkpoint writer and reader share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace topotrain {

constexpr const char* kTimingsFileName = "timings.h5";  // the run's step timings (timings_file.h)
constexpr const char* kLatestFileName = "latest";       // the name of the newest complete checkpoint
constexpr const char* kLogFileName = "log.txt";         // the lead rank's log lines
constexpr const char* kSupersededPrefix = "superseded-";  // superseded_folder's names begin so

// The step of "step-00000100.h5" (exactly that pattern), or nothing.
std::optional<std::int64_t> checkpoint_step(const std::string& file_name);

// (step, path) of every step-*.h5 in run_dir, lowest step first; completeness not checked.
std::vector<std::pair<std::int64_t, std::string>> checkpoint_files(const std::string& run_dir);

// Where a run directory's files past `step` are moved when a launch goes back to `step` (a
// resume from an earlier checkpoint; step 0: --resume fresh) so that the new files never mix
// with them: run_dir/superseded-after-step-<8 digits>, with -2, -3, ... for the first name not
// taken. Nothing is created.
std::string superseded_folder(const std::string& run_dir, std::int64_t step);

// Flushes a file's or directory's contents to disk.
void fsync_path(const std::string& path);

// Replaces `path` with `contents` so that readers see either the old or the new file.
void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace topotrain
