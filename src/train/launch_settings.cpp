#include "topotrain/train/launch_settings.h"

#include <fstream>
#include <regex>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"

namespace topotrain {
namespace {

// "# moe_train launch 3: ..." -> 3; 0 when the first line names no launch.
int launch_of(const std::string& path) {
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  std::smatch match;
  if (!std::regex_search(first, match, std::regex(R"(^# \S+ launch (\d+):)"))) return 0;
  return std::stoi(match[1]);
}

}  // namespace

std::string write_launch_settings(const std::string& run_dir, int launch, const std::string& job,
                                  const std::string& toml) {
  make_directories(run_dir);
  const std::string path = join_path(run_dir, kSettingsFileName);
  if (file_exists(path)) {
    const int earlier = launch_of(path);
    rename_file(path, join_path(run_dir, earlier > 0 ? cat("settings.launch-", earlier, ".toml")
                                                     : std::string("settings.earlier.toml")));
  }
  std::ofstream out(path, std::ios::trunc);
  out << "# " << job << " launch " << launch
      << ": the resolved settings of this run's newest launch (a value's comment says where it came from;\n"
      << "# the others are defaults). Earlier launches' are in settings.launch-N.toml; --config takes this file.\n"
      << toml;
  if (!out.flush()) throw std::runtime_error("cannot write " + path);
  return path;
}

}  // namespace topotrain
