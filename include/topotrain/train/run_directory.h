// Claiming a run directory (checkpoint.dir/checkpoint.run) before a launch writes into it,
// on the launch's rank 0 (the rank that creates it and writes log.txt), so that a directory
// the launch cannot use is refused before a step is trained, with exit 2 and the fix:
//
//   1. created (mkdir -p), or the OS's reason it cannot be (a file in the path: ENOTDIR);
//   2. locked for this job (run_directory_lock.h);
//   3. its shape: the directory writable (a probe file created and removed: EROFS, EACCES,
//      ...), and `latest` a regular file or absent (checked after step 5's move, which takes a
//      wrong `latest` aside with the rest);
//   4. its records against --resume. A run directory holds one run, whose records are its
//      checkpoints and log.txt, metrics.jsonl, timings.h5, settings.toml, ... (every launch
//      appends to them). Where they record trained steps but no complete checkpoint is left
//      (checkpoints deleted, `latest` naming a missing file, checkpoint.every_steps = -1), no
//      launch may go on there except --resume fresh: --resume auto has nothing to continue,
//      and a fresh start or another run's checkpoint would append a second run to the first's
//      records. Records of no trained step (a launch refused or failed before step 1) mix
//      nothing, and a launch goes on after them as before. Where a complete checkpoint is
//      left, CheckpointReader::resolve_resume decides, as a launch's session does.
//   5. --resume fresh: every file of an earlier run (all but the lock and earlier
//      superseded-* folders) is moved into superseded-after-step-00000000[-N], as a resume
//      to an earlier step moves the later checkpoints aside, and the launch starts at step 0
//      with records of its own.
//
// --dry-run writes nothing and takes no lock: inspect_run_directory says what a launch now
// would refuse or do, as warnings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "topotrain/core/file_lock.h"
#include "topotrain/train/run_directory_lock.h"

namespace topotrain {

// --resume's values besides a checkpoint path.
constexpr const char* kResumeAuto = "auto";
constexpr const char* kResumeFresh = "fresh";

// What a run directory holds of a run, read cheaply (no HDF5 file opened).
struct RunRecords {
  std::vector<std::string> found;  // "log.txt", "metrics.jsonl (steps up to 12)", "3 step-*.h5 files", ...
  std::int64_t last_step = 0;      // metrics.jsonl's last step; 0 when it records none
  bool trained = false;            // a trained step is on record (metrics.jsonl, a checkpoint, `latest`)
  std::optional<std::string> latest_missing;  // what `latest` names where that is no complete checkpoint
  // "log.txt, metrics.jsonl (steps up to 12), timings.h5"
  std::string describe() const;
};
RunRecords read_run_records(const std::string& run_dir);

struct RunDirectoryClaim {
  RunDirectoryLock lock;              // held until the launch's process ends
  std::vector<std::string> warnings;  // to log once log.txt is open
};

// Steps 1 to 5 above, for a launch of `resume` ("", "auto", "fresh" or a checkpoint path).
// ConfigError naming run_dir, what is wrong and the fix.
RunDirectoryClaim claim_run_directory(const std::string& run_dir, const std::string& resume, const LockHolder& me);

// --dry-run: what claim_run_directory would refuse (or --resume fresh move aside), without
// writing or locking anything; empty when a launch now would start without a word.
std::vector<std::string> inspect_run_directory(const std::string& run_dir, const std::string& resume);

}  // namespace topotrain
