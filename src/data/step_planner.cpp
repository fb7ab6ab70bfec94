#include "topotrain/data/step_planner.h"

#include "topotrain/core/error.h"

namespace topotrain::data {

StepPlanner::StepPlanner(std::shared_ptr<const TokenDataset> dataset, PackerConfig packing,
                         DataParallelConfig parallel, DataPosition start)
    : packer_(std::move(dataset), packing, start), parallel_(parallel) {
  if (parallel_.world_size < 1 || parallel_.rank < 0 || parallel_.rank >= parallel_.world_size) {
    throw ConfigError(cat("data-parallel rank ", parallel_.rank, " of ", parallel_.world_size,
                          " is out of range: the rank must be in 0 .. world size - 1"));
  }
  if (parallel_.grad_accum < 1) {
    throw ConfigError(cat("train.grad_accum = ", parallel_.grad_accum, " must be at least 1"));
  }
}

StepPlan StepPlanner::next_step() {
  StepPlan plan;
  plan.position_before = packer_.position();
  const int per_step = parallel_.world_size * parallel_.grad_accum;
  plan.global.reserve(per_step);
  plan.micro_batches.reserve(parallel_.grad_accum);
  for (int index = 0; index < per_step; ++index) {
    const MicroBatchLayout layout = packer_.next_layout();
    plan.global.push_back(MicroBatchSummary{layout.num_tokens, layout.num_loss_targets, layout.pieces.size()});
    plan.global_tokens += layout.num_tokens;
    plan.global_loss_targets += layout.num_loss_targets;
    plan.global_sequences += layout.pieces.size();
    if (index % parallel_.world_size == parallel_.rank) plan.micro_batches.push_back(packer_.materialize(layout));
  }
  plan.position_after = packer_.position();
  return plan;
}

}  // namespace topotrain::data
