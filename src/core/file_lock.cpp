#include "topotrain/core/file_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <sstream>
#include <system_error>
#include <thread>

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"

namespace topotrain {
namespace {

[[noreturn]] void fail(int error, const std::string& what) {
  throw std::system_error(error, std::generic_category(), what);
}

// Closes a descriptor unless handed over.
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    const int out = fd;
    fd = -1;
    return out;
  }
};

std::string read_all(int fd, const std::string& path) {
  std::string text;
  char buffer[4096];
  for (off_t offset = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(errno, "cannot read the lock file '" + path + "'");
    if (n == 0) return text;
    text.append(buffer, static_cast<std::size_t>(n));
    offset += n;
  }
}

// A holder writes its name right after taking the lock: give it half a second.
std::string read_holder(int fd, const std::string& path) {
  std::string text = read_all(fd, path);
  for (int i = 0; i < 50 && text.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    text = read_all(fd, path);
  }
  return text;
}

void write_all(int fd, const std::string& path, const std::string& text) {
  if (::ftruncate(fd, 0) != 0) fail(errno, "cannot write the lock file '" + path + "'");
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(errno, "cannot write the lock file '" + path + "'");
    done += static_cast<std::size_t>(n);
  }
}

// flock's answers on file systems that do not implement it: NFS without a lock daemon
// (ENOLCK), Lustre mounted without -o flock (ENOSYS), some FUSE file systems (EOPNOTSUPP).
bool lock_unsupported(int error) {
  return error == ENOLCK || error == ENOSYS || error == EOPNOTSUPP;  // ENOTSUP is EOPNOTSUPP on Linux
}

int flock_retrying(int fd, int operation) {
  int result;
  do result = ::flock(fd, operation);
  while (result != 0 && errno == EINTR);
  return result;
}

std::string ago(std::int64_t seconds) {
  if (seconds < 0) return "in the future: check the hosts' clocks";
  if (seconds < 120) return cat(seconds, " s ago");
  if (seconds < 2 * 3600) return cat(seconds / 60, " min ago");
  if (seconds < 2 * 86400) return cat(seconds / 3600, " h ago");
  return cat(seconds / 86400, " days ago");
}

}  // namespace

std::string lock_holder_text(const LockHolder& holder) {
  return cat("host: ", holder.host, "\npid: ", holder.pid, "\nsince: ", holder.since, " (",
             log_timestamp(static_cast<std::time_t>(holder.since)), ")\nwhat: ", holder.what, "\n");
}

std::optional<LockHolder> parse_lock_holder(const std::string& text) {
  LockHolder holder;
  bool host = false, pid = false, since = false;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto colon = line.find(": ");
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon), value = line.substr(colon + 2);
    try {
      if (key == "host") holder.host = value, host = true;
      if (key == "pid") holder.pid = std::stoll(value), pid = true;
      if (key == "since") holder.since = std::stoll(value), since = true;
      if (key == "what") holder.what = value;
    } catch (const std::exception&) {
      return std::nullopt;  // a number cut short by a write in progress
    }
  }
  if (!host || !pid || !since) return std::nullopt;
  return holder;
}

std::string describe_lock_holder(const LockHolder& holder) {
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  return cat("pid ", holder.pid, " on host ", holder.host, holder.what.empty() ? "" : cat(" (", holder.what, ")"),
             " since ", log_timestamp(static_cast<std::time_t>(holder.since)), " (", ago(now - holder.since), ")");
}

bool process_alive(std::int64_t pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

LockAttempt FileLock::try_acquire(const std::string& path, const LockHolder& holder) {
  Descriptor file{::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
  if (file.fd < 0) fail(errno, "cannot open the lock file '" + path + "'");
  LockAttempt attempt;
  if (flock_retrying(file.fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EWOULDBLOCK) {
      attempt.outcome = LockOutcome::held;
      attempt.previous = read_holder(file.fd, path);
      return attempt;
    }
    if (!lock_unsupported(error)) fail(error, "cannot lock '" + path + "'");
    attempt.outcome = LockOutcome::unsupported;
    attempt.error = error;
    attempt.previous = read_all(file.fd, path);
    return attempt;
  }
  attempt.outcome = LockOutcome::acquired;
  attempt.previous = read_all(file.fd, path);
  // From here on the destructor empties the file, whatever happens next.
  attempt.lock = FileLock(path, file.release());
  write_all(attempt.lock->fd_, path, lock_holder_text(holder));
  return attempt;
}

std::optional<std::string> FileLock::held_by(const std::string& path) {
  Descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    fail(errno, "cannot open the lock file '" + path + "'");
  }
  // A shared lock conflicts only with an exclusive one; dropped at once by the close.
  if (flock_retrying(file.fd, LOCK_SH | LOCK_NB) == 0 || errno != EWOULDBLOCK) return std::nullopt;
  return read_holder(file.fd, path);
}

FileLock::FileLock(FileLock&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) { other.fd_ = -1; }

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

FileLock::~FileLock() { release(); }

void FileLock::release() noexcept {
  if (fd_ < 0) return;
  // Emptied while still held: a file with a name in it and no lock then always means a
  // holder that did not get here.
  if (::ftruncate(fd_, 0) != 0) {
    // Nothing to do about it: the next holder finds the name and says it was left behind.
  }
  ::close(fd_);
  fd_ = -1;
}

}  // namespace topotrain
