// What both roles of dflash_train (dflash_target.h, dflash_drafting.h) build alike, apart
// from the stream cursor (stream_cursor.h): their ends of the hidden-state link, and the
// rows of the timings.h5 they share.
#pragma once

#include <torch/torch.h>


#include "topotrain/comm/hidden_state_link.h"
#include "topotrain/train/run_config.h"
#include "topotrain/core/topology.h"
#include "topotrain/store/timing_log.h"

namespace topotrain {

// [links] of the topology, for this rank's `device`.
comm::LinkConfig link_config(const Topology& topology, const Device& device);

// Both roles write the same columns: the drafter's acceptance length of each step and, on
// the steps that evaluated the held-out documents, theirs, as extra fields, unset on target
// rows.
TimingLogConfig pipeline_timing_config(const RunConfig& run, const torch::Device& device);
StepMetrics row_of(double tokens);

}  // namespace topotrain
