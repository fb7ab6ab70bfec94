// dflash_train: frozen target ranks stream the hidden states of their tap layers to
// drafter ranks, which train a DFlash drafter on them.
//
//   target:  its own sample stream (stream k of the k-th target: data::SampleStream) ->
//            prefetched packed batch -> forward_backbone (no lm_head, no grad) ->
//            concatenated taps (+ the final hidden state for train.loss = "kl") ->
//            HiddenStateSender, the batch's cursor = the stream position after it (blocks
//            while its drafter's queue is full: back-pressure)
//   drafter: HiddenStateReceiver (fan-in from its targets: train.grad_accum batches per
//            step, as they arrive or round-robin, [links] fan_in) -> anchors seeded by each
//            batch's cursor -> drafter forward / backward of each loss sum -> GradReducer
//            among drafters -> gradients over the weight of all drafters' valid slots ->
//            clip -> AdamW
//
// State: a checkpoint (drafter role rank 0 writes it) holds the drafter, its optimizer
// and, per target stream, the position after the last batch a drafter trained on.
// Batches a target had produced but no drafter trained are recomputed after a resume, so
// nothing is skipped or repeated, also with another train.token_budget. At start every
// drafter sends each of its targets where its stream starts.
//
// Ending: without train.max_tokens each target ends its stream after train.epochs epochs
// (its last batch of an epoch is short, never filled from the next); drafters step
// together until all their streams have ended (a last partial step trains what arrived,
// a drafter with nothing left walking empty micro-batches), or stop together at
// train.max_steps / max_tokens, on SIGUSR1, when one of their targets closed early (out of
// memory) or on a non-finite drafter loss or gradient norm (never applied; skipped and
// counted with train.skip_nonfinite). A stopping drafter asks its targets to end their
// streams and drains what was in flight and checkpoints its last trained step (also after
// a failed step, which changed nothing). The end line counts the samples and tokens the
// drafters trained, skipped and discarded (in flight when they stopped early): every
// batch sent is in one of them. Every rank then meets in one agreement: exit 0, or every
// rank leaves with the code and message of the lowest failing rank (3 and the resume
// command for an out-of-memory on a target or a drafter, 4 for a non-finite step).
//
// Here: the job's entry, which routes each rank by its role to dflash_target.h or
// dflash_drafting.h; the cursor protocol behind "nothing skipped or repeated" is in
// stream_cursor.h.
#pragma once

#include "topotrain/train/job.h"

namespace topotrain {

// dflash_train's roles: targets and the drafters they feed, both required.
const JobSpec& dflash_job();

// The dataset's header against the target, the token budget against memory (JobInputCheck).
void check_dflash_inputs(const RunFile& run, const RunConfig& config);
void train_dflash(JobContext& context);

}  // namespace topotrain
