// dflash_train: frozen target ranks stream the hidden states of their tap layers to
// drafter ranks, which train a DFlash drafter on them.
//
//   target:  prefetched micro-batch (its share of the sample stream) -> forward_backbone
//            (no lm_head, no grad) -> concatenated taps -> HiddenStateSender (blocks while
//            its drafter's queue is full: back-pressure)
//   drafter: HiddenStateReceiver (fan-in from its targets) -> anchors -> drafter forward /
//            backward, loss over the weight of all drafters' valid slots -> GradReducer
//            among drafters -> clip -> AdamW
//
// One received batch is one drafter step; with train.max_steps each target sends its
// share of the steps of the drafter it feeds, so every stream ends cleanly.
#pragma once

#include "topotrain/train/job.h"

namespace topotrain {

void train_dflash(JobContext& context);

}  // namespace topotrain
