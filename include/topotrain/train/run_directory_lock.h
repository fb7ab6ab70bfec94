// One job per run directory. Two jobs writing one run directory (the same checkpoint.dir and
// checkpoint.run) overwrite each other's step-N.h5, `latest`, timings.h5 and logs: one may end
// with exit 0 while every checkpoint kept is the other's. So a launch's rank 0, the rank that
// creates the run directory and writes log.txt and timings.h5 (in dflash_train as in
// moe_train: one lock per run directory, whichever group writes the checkpoints), takes
// RUN_DIR/.lock (core/file_lock.h) before the launch writes anything there and holds it until
// the process ends; a killed or aborted process releases it with its last descriptor.
//
// - Held by another job: refused (ConfigError, exit 2 on every rank) naming the holder (host,
//   pid, job, since when) and the fixes.
// - Left by a job that ended without releasing it (its name still in the file, no lock held):
//   taken over, with a warning naming it (on this host: whether its pid is gone).
// - A file system without working locks (flock fails with ENOLCK, ENOSYS or EOPNOTSUPP: NFS
//   without lockd, Lustre without -o flock): the launch goes on unlocked, with a warning. A
//   lock is a guard against a mistake, and refusing would stop every run on such a file
//   system, which users cannot fix. Where locks work on each host but not between hosts (NFS
//   mounted with nolock), the lock cannot tell, and a job on another host looks like one that
//   ended: the takeover warning says so.
#pragma once

#include <optional>
#include <string>

#include "topotrain/core/file_lock.h"

namespace topotrain {

constexpr const char* kRunLockFileName = ".lock";

class RunDirectoryLock {
 public:
  // Takes run_dir's lock for this process, naming `me` in it; run_dir must exist. ConfigError
  // when another job holds it, or when the lock file cannot be created (the OS's reason).
  static RunDirectoryLock take(const std::string& run_dir, const LockHolder& me);

  // For --dry-run, which takes nothing: the refusal `take` would give now, or "" when no job
  // holds run_dir.
  static std::string refusal_if_held(const std::string& run_dir);

  // What the launch should say once its log is open: a lock file taken over, or no lock on
  // this file system; "" when nothing.
  const std::string& warning() const { return warning_; }
  bool held() const { return lock_.has_value(); }

 private:
  std::optional<FileLock> lock_;
  std::string warning_;
};

}  // namespace topotrain
