// Metrics of a DFlash drafter: per-slot accuracy and the expected acceptance length.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

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

// Two trivial drafters scored on exactly the slots a drafter was scored on, so that its acc@k
// and tau read against what needs no learning: the mode drafter drafts one token in every
// slot, the label seen most often over all the slots counted; the slot-mode drafter drafts in
// slot k the label seen most often in slot k. Both are chosen with hindsight on the very slots
// they are scored on, the best any drafter that ignores its context could do there, so a
// drafter at or below them has learned the token frequencies and nothing else.
class TrivialDrafterCounts {
 public:
  TrivialDrafterCounts(int64_t block_size, int64_t vocab_size);
  // The labels of scored slots: `slots` (in [1, B)) and `labels` (in [0, V)), int64 [rows] on
  // one device; the counts live on that device.
  void add(const torch::Tensor& slots, const torch::Tensor& labels);
  // int64 [2 * B] on the counts' device (CPU zeros before any add): the mode drafter's correct
  // drafts per slot, then the slot-mode drafter's. Reading it does not synchronise.
  torch::Tensor correct() const;

 private:
  int64_t block_size_, vocab_size_;
  torch::Tensor counts_;  // int64 [B * V]: label v seen in slot k at k * V + v
};

// Matmul FLOPs of one drafter training step (forward + backward) over a packed batch of
// `tokens` target tokens with these blocks: 2 per multiply-accumulate forward; backward 4
// where both the input and the weight need a gradient, 2 where only one does. What MFU
// counts for the drafter.
double dflash_step_flops(const DFlashConfig& config, const DFlashBlocks& blocks, int64_t tokens);

}  // namespace topotrain::model
