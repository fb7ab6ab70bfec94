// dflash_train's drafter role (dflash_trainer.h): a drafter rank sends each of its targets
// where its stream starts (stream_cursor.h), then takes train.grad_accum hidden-state
// batches per step from its HiddenStateReceiver (as they arrive or round-robin, [links]
// fan_in), draws each batch's anchors from its cursor, runs the drafter's forward and the
// backward of each loss sum, reduces the gradients among the drafters (GradReducer), divides
// them by the weight of all drafters' valid slots, clips and steps AdamW.
//
// The drafters step together: every step they agree on the micro-batches to walk, on
// stopping (a stop signal, a target that closed early), on the step's sums and on its
// first out-of-memory or non-finite rank. The drafter role rank 0 writes the checkpoints
// (the drafter, its optimizer and every stream's position) and prints the drafters'
// progress and end line. How a run ends is described in dflash_trainer.h.
//
// With held-out documents, at every train.eval_every-th step and after the last the drafters
// pause their streams (keeping what was in flight), have their targets send the held-out
// hidden states over a link of their own, evaluate the drafter on them without gradients
// (dflash_held_out.h) and restart the streams after the last batch received
// (docs/dflash.md, "Held-out evaluation").
#pragma once

#include <torch/torch.h>

#include "topotrain/model/causal_lm.h"
#include "topotrain/model/dflash_config.h"
#include "topotrain/train/job.h"

namespace topotrain {

// The drafter keeps `target`'s embedding, final norm and lm_head (frozen).
Runtime::Outcome run_dflash_drafting(JobContext& context, model::CausalLM& target,
                                     const model::DFlashConfig& config, const torch::Device& device);

}  // namespace topotrain
