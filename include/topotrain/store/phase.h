// The named phases a training step is split into. The order is the column order of the
// timing log (timings.h5) and of the report; appending a phase is compatible with old
// logs because readers look columns up by name.
#pragma once

#include <array>
#include <cstddef>
#include <string>

namespace topotrain {

enum class Phase : unsigned char {
  data_wait,   // waiting for the prefetcher's next batch
  h2d,         // host-to-device copies
  forward,
  backward,
  comm_wait,   // waiting for collectives (gradient all-reduce) to finish
  optimizer,
  queue_wait,  // waiting on a hidden-state queue (drafter: empty; target: full)
  send,
  recv,
  checkpoint,  // snapshot for the checkpoint writer (the write itself is on a thread)
};

constexpr std::size_t kPhaseCount = 10;

// Column names: "data_wait", "h2d", ...
const std::array<const char*, kPhaseCount>& phase_names();
inline const char* phase_name(Phase phase) { return phase_names()[static_cast<std::size_t>(phase)]; }

// Phases whose time is spent waiting for another rank or stage; the report separates
// them from work when it names a bottleneck.
bool is_wait_phase(Phase phase);
// Phases that move data between ranks (the report's comm fraction).
bool is_comm_phase(Phase phase);

}  // namespace topotrain
