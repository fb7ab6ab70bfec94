// Where the global sample stream stands. Checkpoints store these four integers; restoring
// them continues at exactly the same sample and token, whatever token_budget, grad_accum
// or world size the resumed run uses (the stream is defined by samples, not by batches).
#pragma once

#include <cstdint>

namespace topotrain::data {

struct DataPosition {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  // Samples of this epoch's permutation fully consumed; always < the number of samples
  // (reaching it rolls over to epoch + 1 at 0).
  uint64_t consumed_samples = 0;
  // Tokens of the next sample already consumed: non-zero only while a sample longer than
  // token_budget is being split across micro-batches.
  uint64_t offset_in_sample = 0;

  bool operator==(const DataPosition& o) const {
    return seed == o.seed && epoch == o.epoch && consumed_samples == o.consumed_samples &&
           offset_in_sample == o.offset_in_sample;
  }
  bool operator!=(const DataPosition& o) const { return !(*this == o); }
};

}  // namespace topotrain::data
