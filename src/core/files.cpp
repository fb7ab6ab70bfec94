#include "topotrain/core/files.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <system_error>

namespace topotrain {
namespace {

[[noreturn]] void fail(int error, const std::string& what) {
  throw std::system_error(error, std::generic_category(), what);
}

bool stat_path(const std::string& path, struct stat& info) { return ::stat(path.c_str(), &info) == 0; }

}  // namespace

bool file_exists(const std::string& path) {
  struct stat info;
  return stat_path(path, info);
}

bool is_directory(const std::string& path) {
  struct stat info;
  return stat_path(path, info) && S_ISDIR(info.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat info;
  return stat_path(path, info) && S_ISREG(info.st_mode);
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat first, second;
  return stat_path(a, first) && stat_path(b, second) && first.st_dev == second.st_dev && first.st_ino == second.st_ino;
}

std::uint64_t file_size(const std::string& path) {
  struct stat info;
  if (!stat_path(path, info)) fail(errno, "cannot read the size of '" + path + "'");
  if (S_ISDIR(info.st_mode)) fail(EISDIR, "cannot read the size of '" + path + "'");
  return static_cast<std::uint64_t>(info.st_size);
}

void make_directories(const std::string& path) {
  if (path.empty()) fail(ENOENT, "cannot create directory ''");
  // Each prefix ending before a '/' is a parent; the whole path comes last.
  for (std::size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string prefix = path.substr(0, end);
    if (::mkdir(prefix.c_str(), 0777) != 0) {
      const int error = errno;
      // EEXIST is fine only for a directory; another process may create it at the same time.
      if (error != EEXIST) fail(error, "cannot create directory '" + prefix + "'");
      if (!is_directory(prefix)) fail(ENOTDIR, "cannot create directory '" + path + "': '" + prefix + "' is a file");
    }
    if (end == std::string::npos) return;
  }
}

std::vector<std::string> list_directory(const std::string& path) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(path.c_str()), ::closedir);
  if (!dir) fail(errno, "cannot list directory '" + path + "'");
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(dir.get())) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  // readdir returns null both at the end and on failure; only errno tells them apart.
  if (errno != 0) fail(errno, "cannot list directory '" + path + "'");
  std::sort(names.begin(), names.end());
  return names;
}

bool remove_file(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  fail(errno, "cannot delete '" + path + "'");
}

void remove_tree(const std::string& path) {
  struct stat info;
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return;
    fail(errno, "cannot delete '" + path + "'");
  }
  if (S_ISDIR(info.st_mode)) {
    for (const std::string& name : list_directory(path)) remove_tree(join_path(path, name));
    if (::rmdir(path.c_str()) != 0) fail(errno, "cannot delete directory '" + path + "'");
    return;
  }
  remove_file(path);
}

void rename_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail(errno, "cannot rename '" + from + "' to '" + to + "'");
}

std::string make_temp_directory(const std::string& prefix) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string pattern = join_path(tmpdir && *tmpdir ? tmpdir : "/tmp", prefix + "XXXXXX");
  if (!::mkdtemp(pattern.data())) fail(errno, "cannot create a temporary directory '" + pattern + "'");
  return pattern;
}

std::string join_path(const std::string& directory, const std::string& name) {
  if (directory.empty()) return name;
  return directory.back() == '/' ? directory + name : directory + "/" + name;
}

std::string file_name(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string parent_directory(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string file_extension(const std::string& path) {
  const std::string name = file_name(path);
  const std::size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0 || name == "..") return "";
  return name.substr(dot);
}

}  // namespace topotrain
