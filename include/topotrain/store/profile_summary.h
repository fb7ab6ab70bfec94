// What one profiled step spent its time on, from the events of torch's profiler, as text a
// user reads: the device activities (kernels, copies) by total time, how busy the device
// was, its longest idle gaps and what surrounded them, and the host-side calls by self
// time (time not spent in a nested call of the same thread). A step that is launch- or
// sync-bound shows here as a low busy share and host time in cudaLaunchKernel or a
// synchronisation call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace topotrain {

struct ProfiledEvent {
  std::string name;
  bool on_device = false;  // a kernel, copy or memset on the GPU; else a host-side call
  std::uint64_t thread = 0;  // host thread (nesting is per thread); unused on the device
  double start_us = 0;
  double duration_us = 0;
};

struct ProfileSummaryOptions {
  std::size_t top = 25;  // rows per table
  std::size_t gaps = 5;  // longest device idle gaps listed
};

// `wall_us` is the step's wall time (the busy share is taken of it); `title` heads the text.
std::string summarize_profile(std::vector<ProfiledEvent> events, double wall_us, const std::string& title,
                              const ProfileSummaryOptions& options = {});

}  // namespace topotrain
