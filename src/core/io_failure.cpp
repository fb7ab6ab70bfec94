#include "topotrain/core/io_failure.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/log.h"

namespace topotrain {
namespace {

const char* errno_name(int error) {
  switch (error) {
    case ENOSPC: return "ENOSPC";
    case EDQUOT: return "EDQUOT";
    case EROFS: return "EROFS";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case EIO: return "EIO";
    case EFBIG: return "EFBIG";
    case ENOENT: return "ENOENT";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case EEXIST: return "EEXIST";
    default: return nullptr;
  }
}

// The nearest existing directory at or above `path`: what statvfs can ask about before the
// file or its folder exists.
std::string existing_directory(std::string path) {
  for (int depth = 0; depth < 64 && !is_directory(path); ++depth) {
    const std::string parent = parent_directory(path);
    if (parent == path) break;
    path = parent;
  }
  return path;
}

}  // namespace

std::optional<FileSystemSpace> file_system_space(const std::string& path) {
  struct statvfs info {};
  if (::statvfs(existing_directory(path).c_str(), &info) != 0) return std::nullopt;
  return FileSystemSpace{static_cast<std::uint64_t>(info.f_bavail) * info.f_frsize,
                         static_cast<std::uint64_t>(info.f_blocks) * info.f_frsize};
}

bool is_write_errno(int error) {
  return error == ENOSPC || error == EDQUOT || error == EROFS || error == EACCES || error == EPERM || error == EIO ||
         error == EFBIG;
}

std::string os_error_text(int error) {
  const char* name = errno_name(error);
  return name ? cat(std::strerror(error), " (", name, ")") : std::string(std::strerror(error));
}

std::string system_error_text(const std::system_error& error) {
  // what() is "<what_arg>: <code().message()>"; the message is replaced, not repeated.
  std::string text = error.what();
  const std::string reason = ": " + error.code().message();
  if (text.size() >= reason.size() && text.compare(text.size() - reason.size(), reason.size(), reason) == 0)
    text.resize(text.size() - reason.size());
  return cat(text, ": ", os_error_text(error.code().value()));
}

std::string write_failure_detail(int error, const std::string& path, std::uint64_t bytes_needed,
                                 const std::string& said) {
  const std::optional<FileSystemSpace> space = file_system_space(path);
  if (!is_write_errno(error)) error = space && bytes_needed > space->available ? ENOSPC : 0;
  std::string detail =
      error && said.find(os_error_text(error)) == std::string::npos ? cat(": ", os_error_text(error)) : std::string();
  if (space && (error == 0 || error == ENOSPC || error == EDQUOT)) {
    detail += cat(detail.empty() ? ": " : "; ", bytes_needed ? cat(format_bytes(static_cast<std::int64_t>(bytes_needed)), " needed, ") : std::string(),
                  format_bytes(static_cast<std::int64_t>(space->available)), " free of ", format_bytes(static_cast<std::int64_t>(space->total)),
                  " on the file system holding ", existing_directory(path));
  }
  return detail;
}

}  // namespace topotrain
