// What the speculative decoding loop (speculative_decoding.h) asks of a drafter: proposals for
// the tokens after the one the target has just produced, conditioned on the target's tap
// states of every position before it. An interface so that the loop can be driven by a DFlash
// drafter (dflash_proposer.h) or, in tests, by a proposer whose answers are known.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace topotrain::infer {

class BlockProposer {
 public:
  virtual ~BlockProposer() = default;

  // B: a verification block is the current token and B - 1 proposals.
  virtual int64_t block_size() const = 0;
  // A new sequence: forget every context row.
  virtual void reset() = 0;
  // The target's tap states [m, taps * hidden] of the next m positions (the context so far is
  // positions 0..context_length()-1; these become context_length()..+m-1).
  virtual void extend_context(const torch::Tensor& taps) = 0;
  virtual int64_t context_length() const = 0;
  // Proposals d1..d_{B-1} (int64 [B - 1], any device) for the positions after `next`, the
  // token at position context_length() that the target produced and has not yet run.
  virtual torch::Tensor propose(int64_t next) = 0;
};

}  // namespace topotrain::infer
