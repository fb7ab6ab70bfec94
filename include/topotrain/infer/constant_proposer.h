// The trivial drafter of a speculation report: one token in every slot, whatever the context.
// Run with the greedy responses' most frequent token (chosen with hindsight, as the trainer's
// mode drafter is: docs/dflash.md "Metrics"), its tau is what a drafter that learned only the
// token frequencies reaches by real decoding, the line a trained drafter's tau is read against.
#pragma once

#include <cstdint>

#include "topotrain/infer/block_proposer.h"

namespace topotrain::infer {

class ConstantProposer : public BlockProposer {
 public:
  ConstantProposer(int64_t block_size, int64_t token);
  int64_t block_size() const override { return block_size_; }
  void reset() override { context_ = 0; }
  void extend_context(const torch::Tensor& taps) override { context_ += taps.size(0); }
  int64_t context_length() const override { return context_; }
  torch::Tensor propose(int64_t next) override;

 private:
  int64_t block_size_, token_, context_ = 0;
};

}  // namespace topotrain::infer
