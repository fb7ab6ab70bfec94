// What both roles of dflash_train (dflash_target.h, dflash_drafting.h) build alike, apart
// from the stream cursor (stream_cursor.h): their ends of the hidden-state link, the rows
// of the timings.h5 they share, and the stream's automatic token budget.
#pragma once

#include <torch/torch.h>


#include "topotrain/comm/hidden_state_link.h"
#include "topotrain/model/dflash_config.h"
#include "topotrain/train/run_config.h"
#include "topotrain/core/topology.h"
#include "topotrain/store/timing_log.h"
#include "topotrain/train/budget_probe.h"
#include "topotrain/train/job.h"
#include "topotrain/train/progress.h"

namespace topotrain {

// [links] of the topology, for this rank's `device`.
comm::LinkConfig link_config(const Topology& topology, const Device& device);

// Both roles write the same columns: the drafter's acceptance length of each step and the
// trivial drafters' on the same slots (draft_quality.h), on the steps that evaluated the
// held-out documents the same three over them, and on those that also decoded held-out prompts
// (train.eval_speculate) the real and the trivial drafter's tau, as extra fields, unset on
// target rows.
inline const std::vector<std::string> kPipelineExtraFields = {
    "tau",           "tau_mode", "tau_slot_mode", "eval_tau", "eval_tau_mode", "eval_tau_slot_mode",
    "eval_decoded_tau", "eval_decoded_trivial_tau"};
TimingLogConfig pipeline_timing_config(const RunConfig& run, const torch::Device& device);
StepMetrics row_of(double tokens);
// Fills a drafter row's extra fields from the step's report (what it did not measure stays
// unset).
void set_draft_quality(StepMetrics& metrics, const StepReport& report);

// The bytes of one token's hidden states on the link: [taps (+ final hidden)] columns in
// the dtype the targets compute in.
double payload_bytes_per_token(const model::DFlashConfig& config, const RunConfig& run, const torch::Device& device);

}  // namespace topotrain
