#include "topotrain/store/run_dir_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "topotrain/core/files.h"

namespace topotrain {

std::optional<std::int64_t> checkpoint_step(const std::string& name) {
  const std::string prefix = "step-", suffix = ".h5";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }))
    return std::nullopt;
  return std::stoll(digits);
}

std::vector<std::pair<std::int64_t, std::string>> checkpoint_files(const std::string& run_dir) {
  std::vector<std::pair<std::int64_t, std::string>> files;
  if (!is_directory(run_dir)) return files;
  for (const std::string& name : list_directory(run_dir)) {
    const std::string path = join_path(run_dir, name);
    if (!is_regular_file(path)) continue;
    if (auto step = checkpoint_step(name)) files.emplace_back(*step, path);
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string superseded_folder(const std::string& run_dir, std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "%safter-step-%08lld", kSupersededPrefix, static_cast<long long>(step));
  const std::string base = join_path(run_dir, name);
  std::string folder = base;
  for (int n = 2; file_exists(folder); ++n) folder = base + "-" + std::to_string(n);
  return folder;
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path + " to sync it: " + std::strerror(errno));
  const int status = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (status != 0) throw std::runtime_error("cannot sync " + path + ": " + std::strerror(saved));
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << contents;
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + temporary);
  }
  fsync_path(temporary);
  rename_file(temporary, path);
  fsync_path(parent_directory(path));
}

}  // namespace topotrain
