// Test helper: TensorBoard event files as tests/read_tfevents.py (an independent pure-Python
// reader that checks every record's framing) decodes them, one JSON object per file:
// {"path", "file_version", "events": [{"step", "wall_time", "values": {tag: value}}]}.
// A file the reader rejects fails the calling test with the reader's message.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "topotrain/core/files.h"

namespace topotrain::test_support {

inline std::vector<nlohmann::json> read_tfevents(const std::vector<std::string>& paths) {
  std::string command = "/usr/bin/python3 " + std::string(TOPOTRAIN_SOURCE_DIR) + "/tests/read_tfevents.py";
  for (const std::string& path : paths) command += " '" + path + "'";
  command += " 2>&1";
  std::vector<nlohmann::json> files;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "cannot run " << command;
    return files;
  }
  std::string output;
  char buffer[4096];
  for (std::size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  if (pclose(pipe) != 0) {
    ADD_FAILURE() << command << " failed:\n" << output;
    return files;
  }
  for (std::size_t at = 0, end; (end = output.find('\n', at)) != std::string::npos; at = end + 1)
    files.push_back(nlohmann::json::parse(output.substr(at, end - at)));
  return files;
}

// Every file in `dir`: the event files of a TensorBoard log directory.
inline std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> paths;
  for (const std::string& name : list_directory(dir)) paths.push_back(join_path(dir, name));
  return paths;
}

}  // namespace topotrain::test_support
