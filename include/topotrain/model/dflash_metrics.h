// Metrics of a DFlash drafter: per-slot accuracy and the expected acceptance length.
#pragma once

#include <cstdint>
#include <vector>

#include "topotrain/model/dflash_anchors.h"
#include "topotrain/model/dflash_config.h"

namespace topotrain::model {

// Accuracy of slots 1..B-1 (size B - 1) from per-slot counts of size B (slot 0, the anchor,
// is skipped): correct[k] / valid[k], 0 for a slot without a valid position. Sum the counts
// over ranks and micro-batches first.
std::vector<double> slot_accuracy(const std::vector<int64_t>& correct, const std::vector<int64_t>& valid);

// tau = 1 + sum_{k=1}^{B-1} prod_{i=1}^{k} acc_i, accuracy = acc_1..acc_{B-1}: the expected
// tokens accepted per verification if slot errors were independent.
double acceptance_length(const std::vector<double>& accuracy);

// Matmul FLOPs of one drafter training step (forward + backward) over a packed batch of
// `tokens` target tokens with these blocks: 2 per multiply-accumulate forward; backward 4
// where both the input and the weight need a gradient, 2 where only one does. What MFU
// counts for the drafter.
double dflash_step_flops(const DFlashConfig& config, const DFlashBlocks& blocks, int64_t tokens);

}  // namespace topotrain::model
