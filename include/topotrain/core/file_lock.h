// An exclusive advisory lock on one file that names its holder: what keeps two jobs out of
// one run directory (train/run_directory_lock.h says how jobs use it).
//
// flock(2), never waited for. The kernel drops the lock when the holder's last descriptor of
// it closes, so a process that is killed or aborts releases it without running any code; the
// file itself stays. The holder writes who it is into the file while it holds the lock and
// empties the file when it releases the lock in order, so that:
//   - locked:               a live holder, named by the file;
//   - unlocked, empty:      free, released in order (or never taken);
//   - unlocked, not empty:  left by a holder that ended without releasing (killed, aborted),
//                           or, on a file system whose locks do not reach other hosts (NFS
//                           without lockd), held on another host: the caller decides.
// The file is never deleted: unlinking a lock file races with another process that opened it
// before the unlink and locks the orphaned inode.
//
// Invariant: one FileLock per held lock; the descriptor is close-on-exec, so a program the
// holder starts does not keep the lock alive after the holder dies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace topotrain {

// Who holds (or held) a lock, as written into the lock file.
struct LockHolder {
  std::string host;
  std::int64_t pid = 0;
  std::int64_t since = 0;  // Unix seconds when the lock was taken
  std::string what;        // free text: the job, its topology and ranks
};

// The lock file's contents: one "key: value" line each (host, pid, since, what), readable
// by `cat`.
std::string lock_holder_text(const LockHolder& holder);
// Parses lock_holder_text's form; nullopt for other text (an empty file, a partial write).
std::optional<LockHolder> parse_lock_holder(const std::string& text);
// "pid 4242 on host node-a (moe_train, ...) since 2026-12-01 10:41:07 (3 min ago)"
std::string describe_lock_holder(const LockHolder& holder);

// Whether a process of this pid exists on this host (kill(pid, 0): EPERM counts as alive).
bool process_alive(std::int64_t pid);

enum class LockOutcome {
  acquired,     // the attempt's FileLock holds it; `previous` is what the file held before
  held,         // another open file description holds it; `previous` names its holder
  unsupported,  // the file system has no working flock (ENOLCK, ENOSYS, EOPNOTSUPP); `error`
};
struct LockAttempt;

class FileLock {
 public:
  // Opens (creating, mode 0644) `path` and tries to take its lock at once. Acquired: `holder`
  // replaces the file's text. Held: `previous` is read again for up to half a second while it
  // is empty, as the holder writes it right after locking. Throws std::system_error naming
  // `path` when the file cannot be opened, read or written (the OS's reason in code()).
  static LockAttempt try_acquire(const std::string& path, const LockHolder& holder);

  // The text of a lock file whose lock is held by someone else, without taking it (a shared
  // lock tried for an instant and dropped): nullopt when the lock is free or the file
  // missing, "" when held but the holder has not written its name yet. Writes nothing; a
  // try_acquire at that very instant finds the lock held.
  static std::optional<std::string> held_by(const std::string& path);

  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  // Empties the file, then releases the lock.
  ~FileLock();

  const std::string& path() const { return path_; }

 private:
  FileLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  void release() noexcept;
  std::string path_;
  int fd_ = -1;
};

struct LockAttempt {
  LockOutcome outcome = LockOutcome::unsupported;
  std::optional<FileLock> lock;  // with `acquired` only
  std::string previous;          // the file's text before this attempt ("" when empty or new)
  int error = 0;                 // errno of flock, with `unsupported`
};

}  // namespace topotrain
