// Re-splitting a DFlash topology: the same ranks and devices, another number of targets and
// drafters. topotrain-report writes the split its throughput model recommends this way
// (store/topology_advice.h), from the topology text a run's checkpoints keep.
//
// The text is edited, not re-serialised, so that comments, [links], [model], [train] and
// every other table stay as written: the [[roles]] tables are replaced by one target and
// one drafter table at the place of the first, each rank keeps its device, and the role
// listed at the lower ranks before keeps them. A `route` is dropped (its ranks no longer
// exist or no longer mean the same pairing): targets are then dealt round-robin over the
// drafters. A [topology] name of the form "...<T>t<D>d..." is renamed to the new counts.
#pragma once

#include <string>

namespace topotrain {

// `text` parsed as a topology (`source` names it in messages) with `targets` target and
// `drafters` drafter ranks, their sum its ranks. Throws ConfigError when the text is not a
// target/drafter topology, the counts do not fit it (more drafters than targets leave a
// drafter without one), or its roles place ranks in ways that
// cannot be carried over (one role on listed devices, another on the default placement).
std::string resplit_topology(const std::string& text, const std::string& source, int targets, int drafters);

}  // namespace topotrain
