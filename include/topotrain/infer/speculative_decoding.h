// Greedy decoding of one prompt by a target, plainly (one token per forward) and with DFlash
// speculation (a drafter proposes a block, the target verifies it in one forward), and what
// each costs.
//
// Speculation is lossless by construction: every kept token is the target's own greedy choice
// after the tokens before it. A verification runs [next, d1..d_{B-1}] at positions
// start..start+B-1; posterior[j] is the target's argmax after block position j; the kept
// tokens are d1..d_a for the longest prefix with d_{j+1} == posterior[j], then posterior[a]
// (the bonus token, the next `next`). The target's cache is cropped to start + a + 1 and the
// drafter's context grows by the tap states of block positions 0..a. The verification's
// acceptance length is a + 1, as the DFlash paper counts it (tau is its mean).
//
// Both decodes stop after max_new_tokens or at the first stop token, which is kept; a block
// that runs past either is cut there. Target forwards count the prompt's forward (which
// yields the first token), so plain greedy decoding makes exactly one per token. Times are
// host wall clock from the prompt's forward to the last token read back; on CUDA every step
// reads its tokens back anyway, so the end of a decode is synchronised without a further wait.
// Callers hold a torch::NoGradGuard.
#pragma once

#include <cstdint>
#include <vector>

#include "topotrain/infer/block_proposer.h"
#include "topotrain/infer/cached_target.h"

namespace topotrain::infer {

struct DecodeOptions {
  int64_t max_new_tokens = 128;     // >= 1
  std::vector<int64_t> stop_tokens;  // e.g. the target's eos ids
};

struct Decoded {
  std::vector<int64_t> tokens;  // the response, without the prompt
  int64_t target_forwards = 0;  // the prompt's forward included
  // Speculative decoding, per verification: accepted + 1, and the index in the response of
  // its first token (`next`). Empty for plain greedy decoding.
  std::vector<int64_t> acceptance_lengths, verification_positions;
  double seconds = 0;
};

// `prompt` holds at least one token id below the target's vocabulary size.
Decoded greedy_decode(CachedTarget& target, const std::vector<int64_t>& prompt, const DecodeOptions& options);
// The target's taps must be those the proposer's context is made of.
Decoded speculative_decode(CachedTarget& target, BlockProposer& proposer, const std::vector<int64_t>& prompt,
                           const DecodeOptions& options);

}  // namespace topotrain::infer
