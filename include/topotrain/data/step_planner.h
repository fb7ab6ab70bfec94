// Deals the global stream of packed micro-batches to data-parallel ranks.
//
// With W ranks and gradient accumulation A, optimizer step s consumes the global
// micro-batches [s*W*A, (s+1)*W*A); rank r takes those whose index within the step is
// k*W + r for k = 0..A-1 (interleaved, so at each accumulation round the W ranks hold W
// consecutive micro-batches). Every rank lays out all W*A micro-batches of a step (a walk
// over sample lengths, no token copies) and materializes only its own, so each rank knows
// the step's global token counts without communication, and the position after the step
// is the same on every rank. Once the packer's stream has ended (PackerConfig::end_epoch)
// the step's remaining micro-batches are empty (num_tokens 0): the last step is short,
// and a rank may have nothing to train in some of its accumulation rounds.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "topotrain/data/token_budget_packer.h"

namespace topotrain::data {

struct DataParallelConfig {
  int world_size = 1;  // data-parallel ranks sharing the stream
  int rank = 0;        // this rank's index among them
  int grad_accum = 1;  // micro-batches per rank per optimizer step
};

struct MicroBatchSummary {
  uint64_t num_tokens = 0;
  uint64_t num_loss_targets = 0;
  uint64_t num_sequences = 0;
};

struct StepPlan {
  std::vector<PackedBatch> micro_batches;  // this rank's A micro-batches, in accumulation order
  std::vector<MicroBatchSummary> global;   // all W*A micro-batches of the step, index k*W + r
  // Sums over `global`. The LM loss of a step is its sum over the trained next-token
  // targets divided by global_loss_targets, so that W ranks x A micro-batches train what
  // one process would on their union.
  uint64_t global_tokens = 0;
  uint64_t global_loss_targets = 0;
  uint64_t global_sequences = 0;
  DataPosition position_before;
  DataPosition position_after;  // store this in a checkpoint taken after the step
};

class StepPlanner {
 public:
  StepPlanner(std::shared_ptr<const TokenDataset> dataset, PackerConfig packing, DataParallelConfig parallel,
              DataPosition start);

  StepPlan next_step();
  const DataPosition& position() const { return packer_.position(); }

 private:
  TokenBudgetPacker packer_;
  DataParallelConfig parallel_;
};

}  // namespace topotrain::data
