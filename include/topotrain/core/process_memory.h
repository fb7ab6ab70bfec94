// This process's memory as the operating system sees it: what a CPU run's progress line
// shows in place of a GPU's peak allocation.
#pragma once

#include <cstdint>

namespace topotrain {

// Bytes of this process now resident in RAM (Linux: /proc/self/statm); 0 where unknown.
std::int64_t resident_set_bytes();

}  // namespace topotrain
