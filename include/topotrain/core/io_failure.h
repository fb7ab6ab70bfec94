// Why a write failed, in the words a user acts on: the OS's reason with its errno name ("No
// space left on device (ENOSPC)") and, where the file system can tell, the bytes the write
// needed and the bytes free on it. Store and data writers put this in every message of a
// failed write, so that a full disk, a quota, a read-only mount or a permission is called by
// its name instead of "cannot write tensor 'x'".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <system_error>

namespace topotrain {

// Bytes free to an unprivileged writer and in all on the file system holding `path` (the
// nearest existing directory at or above it); nullopt where statvfs fails.
struct FileSystemSpace {
  std::uint64_t available = 0;
  std::uint64_t total = 0;
};
std::optional<FileSystemSpace> file_system_space(const std::string& path);

// errno values that only a failed write or create leaves behind (ENOSPC, EDQUOT, EROFS,
// EACCES, EPERM, EIO, EFBIG): a failed library call (HDF5's, a stream's) reports the reason
// only through errno, which a value of this set names truly even when read a few calls late.
// Others (ENOENT, say) are left by probes that succeeded around the write and would mislead.
bool is_write_errno(int error);

// "No space left on device (ENOSPC)"; strerror's words with the symbolic name where known.
std::string os_error_text(int error);

// A std::system_error of files.h or file_lock.h with its reason as os_error_text gives it:
// "cannot create directory 'a/b': 'a' is a file: Not a directory (ENOTDIR)".
std::string system_error_text(const std::system_error& error);

// What a failed write of `bytes_needed` bytes (0: unknown) under `path` says after its own
// message `said` ("cannot write X"): ": <reason>; <needed> needed, <free> free of <total> on
// the file system holding <dir>". The reason is os_error_text(error) when
// is_write_errno(error); otherwise, where the file system has less free than the write needed,
// ENOSPC's; otherwise none; it is left out where `said` already holds it. The space part is
// given where known and the reason is about space or unknown.
std::string write_failure_detail(int error, const std::string& path, std::uint64_t bytes_needed = 0,
                                 const std::string& said = "");

}  // namespace topotrain
