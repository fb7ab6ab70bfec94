// A DFlash drafter as a BlockProposer: the geometry of training (dflash_attention.h), one
// block at a time. Context rows go through fc and hidden_norm once, into each draft layer's
// k/v projection (k_norm and RoPE at their positions), and are kept in a cache; a proposal
// embeds the block [next, mask x (B - 1)] at positions start..start+B-1 with the target's
// embedding, lets it attend to every cached row (positions < start) and to itself
// bidirectionally, and reads the argmax of the target's final norm and lm_head at slots
// 1..B-1. The block's own keys and values are not kept.
//
// The draft layers are DFlashDrafterImpl::draft_layers, the loop forward_blocks runs, with the
// cache as each layer's context: the proposal at `start` is what forward_blocks computes for a
// block anchored at row `start` of the same sequence and tap states (tests/infer checks it).
// Callers hold a torch::NoGradGuard.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "topotrain/infer/block_proposer.h"
#include "topotrain/model/dflash_drafter.h"
#include "topotrain/model/kv_cache.h"

namespace topotrain::infer {

class DFlashProposer : public BlockProposer {
 public:
  // The drafter must outlive this; its device and compute dtype are read at construction.
  explicit DFlashProposer(model::DFlashDrafterImpl& drafter);

  int64_t block_size() const override { return drafter_.config().block_size; }
  void reset() override { cache_.clear(); }
  void extend_context(const torch::Tensor& taps) override;
  int64_t context_length() const override { return cache_.length(); }
  torch::Tensor propose(int64_t next) override;

  // The draft layers' last hidden states of the block [next, mask...] at the current
  // position, [B, hidden], before the final norm: what propose() reads slots 1..B-1 of.
  torch::Tensor block_hidden(int64_t next);
  // Logits of the target's lm_head after its final norm, fp32 [B - 1, vocab], at slots 1..B-1.
  torch::Tensor block_logits(int64_t next);

 private:
  model::DFlashDrafterImpl& drafter_;
  model::KvCache cache_;
};

}  // namespace topotrain::infer
