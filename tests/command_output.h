// Test helper: what a command prints (stdout and stderr together), expecting it to exit with
// `status`, so that a test can assert on what a user of a binary would read.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace topotrain::test_support {

inline std::string command_output(const std::string& command, int status = 0) {
  std::FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  EXPECT_NE(pipe, nullptr) << command;
  if (!pipe) return "";
  std::string text;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) text.append(buffer, n);
  EXPECT_EQ(WEXITSTATUS(pclose(pipe)), status) << command << "\n" << text;
  return text;
}

}  // namespace topotrain::test_support
