// This process's memory as the operating system sees it: what a CPU run's progress line
// shows in place of a GPU's peak allocation, and what a CPU rank can hold at most.
#pragma once

#include <cstdint>

namespace topotrain {

// Bytes of this process now resident in RAM (Linux: /proc/self/statm); 0 where unknown.
std::int64_t resident_set_bytes();
// Bytes of RAM this machine has (sysconf); 0 where unknown.
std::int64_t physical_memory_bytes();

}  // namespace topotrain
