// Test helper: the message of the ConfigError an action throws, or "(no ConfigError)", so
// that a test can assert on what a user would read.
#pragma once

#include <functional>
#include <string>

#include "topotrain/core/error.h"

namespace topotrain::test_support {

inline std::string config_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

}  // namespace topotrain::test_support
