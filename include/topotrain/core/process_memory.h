// This process's memory as the operating system sees it: what a CPU run's progress line
// shows in place of a GPU's peak allocation, what a CPU rank can hold at most, and the
// peak that train.token_budget = "auto" measures on a CPU rank.
#pragma once

#include <cstdint>

namespace topotrain {

// Bytes of this process now resident in RAM (Linux: /proc/self/statm); 0 where unknown.
std::int64_t resident_set_bytes();
// The most bytes this process has held resident since it started or since the last
// reset_peak_resident_set (Linux: VmHWM of /proc/self/status); 0 where unknown.
std::int64_t peak_resident_set_bytes();
// Restarts peak_resident_set_bytes from what is resident now (Linux: "5" written to
// /proc/self/clear_refs); false where the system cannot, and then the peak keeps counting
// from the process's start.
bool reset_peak_resident_set();
// Bytes of RAM this machine has (sysconf); 0 where unknown.
std::int64_t physical_memory_bytes();

}  // namespace topotrain
