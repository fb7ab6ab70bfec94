// A directory of its own for one test process's files, removed with its contents when the
// process exits (ctest -j may run several test binaries at once).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace topotrain::data {

inline std::string test_file(const std::string& name) {
  struct Dir {
    std::filesystem::path path = std::filesystem::temp_directory_path() /
                                 ("topotrain_data_test_" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Dir dir;
  return (dir.path / name).string();
}

}  // namespace topotrain::data
