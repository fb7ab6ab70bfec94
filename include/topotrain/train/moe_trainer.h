// moe_train: data-parallel training of a Qwen3(-MoE) LM, one rank per device.
//
// One optimizer step, read top to bottom in moe_trainer.cpp:
//   prefetched step plan (this rank's grad_accum micro-batches + the step's global token
//   counts) -> forward/backward per micro-batch, loss = sum of token losses / global
//   target count (so the summed gradient is the token-weighted mean over all ranks) ->
//   GradReducer (all-reduce on the last micro-batch only) -> the step's agreement (loss
//   sums, OOM, non-finite, stop: one collective) -> clip -> AdamW at the token-based LR ->
//   timings, progress, checkpoint. The step's skeleton is the TrainingSession's
//   (training_session.h), shared with dflash_train's drafters.
#pragma once

#include "topotrain/train/job.h"

namespace topotrain {

// moe_train's roles: every rank a data-parallel trainer.
const JobSpec& moe_job();

// The dataset's header against the model, the token budget against memory (JobInputCheck).
void check_moe_inputs(const RunFile& run, const RunConfig& config);
void train_moe(JobContext& context);

}  // namespace topotrain
