// Test helper: the text of a file of the source tree (a topology under topology/, say), for
// tests that check what the project ships. Tests built by topotrain_add_test know the tree
// as TOPOTRAIN_SOURCE_DIR.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace topotrain::test_support {

inline std::string read_source_file(const std::string& relative) {
  std::ifstream in(std::string(TOPOTRAIN_SOURCE_DIR) + "/" + relative);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace topotrain::test_support
