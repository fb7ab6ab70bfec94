// Test helper: the names a README.md line lists, for tests that a doc list of keys or tags
// is the code's. The line starts with `prefix` (e.g. "`metrics.jsonl` keys:"); what follows
// it in backticks are the names. A README without such a line fails the calling test.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

namespace topotrain::test_support {

inline std::set<std::string> readme_listing(const std::string& prefix) {
  std::ifstream in(std::string(TOPOTRAIN_SOURCE_DIR) + "/README.md");
  std::string line, listing;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) listing = line;
  std::set<std::string> names;
  if (listing.empty()) {
    ADD_FAILURE() << "README.md has no line starting with " << prefix;
    return names;
  }
  for (std::size_t at = listing.find('`', prefix.size()); at != std::string::npos; at = listing.find('`', at + 1)) {
    const std::size_t end = listing.find('`', at + 1);
    if (end == std::string::npos) break;
    names.insert(listing.substr(at + 1, end - at - 1));
    at = end;
  }
  return names;
}

}  // namespace topotrain::test_support
