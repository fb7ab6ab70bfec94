#include "topotrain/train/run_directory_lock.h"

#include <system_error>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/io_failure.h"

namespace topotrain {
namespace {

std::string refusal(const std::string& run_dir, const std::string& holder_text) {
  const auto holder = parse_lock_holder(holder_text);
  const std::string who =
      holder ? describe_lock_holder(*holder)
             : holder_text.empty() ? cat("a job that has not yet written its name into ", join_path(run_dir, kRunLockFileName))
                                   : cat("the job named in ", join_path(run_dir, kRunLockFileName), ": ", holder_text);
  return cat("run directory ", run_dir, " is in use by another job: ", who,
             ". Two jobs in one run directory overwrite each other's checkpoints and logs: give this launch another "
             "checkpoint.run (--set checkpoint.run=NAME), or wait for that job to end, or stop it (SIGUSR1 to its "
             "mpirun stops it with a checkpoint) and then continue its run here with --resume auto");
}

// A name left in the file of a lock nobody holds: its holder ended without releasing it.
std::string takeover_warning(const std::string& path, const std::string& previous, const std::string& my_host) {
  const auto holder = parse_lock_holder(previous);
  if (!holder) return cat("took over ", path, ", which held \"", previous, "\" but no lock");
  std::string why;
  if (holder->host == my_host)
    why = process_alive(holder->pid)
              ? cat("its lock was free, so that process ended; pid ", holder->pid, " is now another process")
              : cat("pid ", holder->pid, " is gone");
  else
    why = cat("its lock was free, so it ended (its node failed, or it was killed), unless the file system of ", path,
              " does not share locks between hosts (NFS mounted with nolock): then, if that job still runs, stop "
              "this one at once");
  return cat("took over the run directory from ", describe_lock_holder(*holder),
             ", which ended without releasing it (killed or aborted): ", why);
}

}  // namespace

RunDirectoryLock RunDirectoryLock::take(const std::string& run_dir, const LockHolder& me) {
  const std::string path = join_path(run_dir, kRunLockFileName);
  LockAttempt attempt;
  try {
    attempt = FileLock::try_acquire(path, me);
  } catch (const std::system_error& e) {
    throw ConfigError(cat("cannot lock run directory ", run_dir, ": ", system_error_text(e),
                          ": point checkpoint.dir at a directory this job can write"));
  }
  RunDirectoryLock lock;
  switch (attempt.outcome) {
    case LockOutcome::held: throw ConfigError(refusal(run_dir, attempt.previous));
    case LockOutcome::acquired:
      lock.lock_ = std::move(attempt.lock);
      if (!attempt.previous.empty()) lock.warning_ = takeover_warning(path, attempt.previous, me.host);
      break;
    case LockOutcome::unsupported: {
      const auto left = parse_lock_holder(attempt.previous);
      lock.warning_ = cat("cannot lock ", path, ": ", os_error_text(attempt.error),
                          ": the file system holding ", run_dir, " has no file locks (NFS without lockd, Lustre "
                          "mounted without -o flock), so another job started in this run directory would not be "
                          "refused; going on without the lock",
                          left ? cat(". The file names ", describe_lock_holder(*left), ": if that job still runs, "
                                     "stop this one, as the two would overwrite each other's checkpoints")
                               : std::string());
      break;
    }
  }
  return lock;
}

std::string RunDirectoryLock::refusal_if_held(const std::string& run_dir) {
  try {
    if (auto holder = FileLock::held_by(join_path(run_dir, kRunLockFileName))) return refusal(run_dir, *holder);
  } catch (const std::system_error& e) {
    return cat("cannot read the lock of run directory ", run_dir, ": ", e.what());
  }
  return "";
}

}  // namespace topotrain
