// Test helper: the names a line of README.md (or of another doc of the source tree) lists,
// for tests that a doc list of keys, tags or columns is the code's. The line starts with
// `prefix` (e.g. "`metrics.jsonl` keys:"); what follows it in backticks are the names. A doc
// without such a line fails the calling test.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

namespace topotrain::test_support {

// `doc`: a path from the source tree's root.
inline std::set<std::string> doc_listing(const std::string& doc, const std::string& prefix) {
  std::ifstream in(std::string(TOPOTRAIN_SOURCE_DIR) + "/" + doc);
  std::string line, listing;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) listing = line;
  std::set<std::string> names;
  if (listing.empty()) {
    ADD_FAILURE() << doc << " has no line starting with " << prefix;
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

inline std::set<std::string> readme_listing(const std::string& prefix) { return doc_listing("README.md", prefix); }

}  // namespace topotrain::test_support
