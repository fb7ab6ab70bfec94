// A directory of its own for one test process's files, removed with its contents when the
// process exits (ctest -j may run several test binaries at once).
#pragma once

#include <string>

#include "topotrain/core/files.h"

namespace topotrain::data {

inline std::string test_file(const std::string& name) {
  struct Dir {
    std::string path = make_temp_directory("topotrain_data_test_");
    ~Dir() {
      try {
        remove_tree(path);
      } catch (const std::exception&) {
        // Leftover files in the temporary directory must not fail the tests at exit.
      }
    }
  };
  static const Dir dir;
  return join_path(dir.path, name);
}

}  // namespace topotrain::data
