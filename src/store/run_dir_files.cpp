#include "topotrain/store/run_dir_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

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
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir, error)) {
    if (!entry.is_regular_file()) continue;
    if (auto step = checkpoint_step(entry.path().filename().string())) files.emplace_back(*step, entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
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
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) throw std::runtime_error("cannot rename " + temporary + " to " + path + ": " + error.message());
  fsync_path(std::filesystem::path(path).parent_path().string());
}

}  // namespace topotrain
