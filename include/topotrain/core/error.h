// Errors that reach users, and the small string builder every message uses.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace topotrain {

// Builds a message from any streamable pieces: cat("rank ", r, " has ", n, " GPUs").
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// Bad input from the user (a topology file, a setting, a data file, a command line).
// Every rank sees the same input, so every rank raises the same ConfigError; the job
// runner prints it once and exits non-zero on all ranks. The message names the file or
// key and says how to fix it.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace topotrain
