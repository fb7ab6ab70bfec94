// dflash_train's target role (dflash_trainer.h): a frozen target rank reads its own sample
// stream from the position its drafter sends at start (stream_cursor.h), runs
// forward_backbone on each prefetched packed batch (no lm_head, no grad) and sends the
// concatenated taps (+ the final hidden state for train.loss = "kl") with the batch's
// cursor to its drafter, blocking while the drafter's queue is full (back-pressure).
//
// A stream ends when the data does (after train.epochs), when its drafter asks it to stop,
// on a stop signal (stop_signal.h), or on an out-of-memory in a forward, which closes the
// stream with a reason so that the drafters stop too: with train.oom = "shrink" every
// stream then restarts with half the budget, else the job ends (exit 3 with the resume
// command). After each stream the target waits for its drafter's next start, which may be
// a held-out pass instead (train.eval_every): it then sends the hidden states of its share
// of the held-out documents (pack_held_out, packed at the start's budget) without a cursor
// and closes. It returns when the drafter says the run's streams are over.
#pragma once

#include <torch/torch.h>

#include "topotrain/model/causal_lm.h"
#include "topotrain/model/dflash_config.h"
#include "topotrain/train/job.h"

namespace topotrain {

// `target` (its weights loaded) is moved to `device` in the compute dtype and kept frozen.
Runtime::Outcome run_dflash_target(JobContext& context, model::CausalLM& target,
                                   const model::DFlashConfig& config, const torch::Device& device);

}  // namespace topotrain
