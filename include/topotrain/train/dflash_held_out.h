// dflash_train's held-out draft quality (train.eval_every with data.eval_path or
// data.eval_fraction): the statistics training reports of a step (docs/dflash.md,
// "Metrics": the weighted loss, and per block slot the correct drafts and the valid slots,
// from which acc@k and tau follow) for a forward of the drafter without gradients over
// held-out batches. Each drafter adds the batches its targets sent; agree() sums every
// drafter's counts before anything is divided, so the result is that of the whole held-out
// set whatever the number of drafters. Nothing here touches a parameter, a gradient, the
// optimizer or a random generator but the caller's anchor draws.
#pragma once

#include <mpi.h>

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "topotrain/model/dflash_anchors.h"
#include "topotrain/model/dflash_drafter.h"
#include "topotrain/model/dflash_metrics.h"
#include "topotrain/train/draft_quality.h"

namespace topotrain {

struct HeldOutDraftQuality {
  double loss_sum = 0, weight = 0;
  DraftQuality draft;  // per block slot, with the trivial drafters' on the same slots
  std::int64_t batches = 0, anchors = 0, tokens = 0;

  double loss() const;  // loss_sum / weight (0 without a valid slot)
};

class HeldOutDraftSums {
 public:
  HeldOutDraftSums(std::int64_t block_size, std::int64_t vocab_size);

  // One held-out batch at `blocks`: its statistics stay on the device until agree().
  void add(model::DFlashDrafterImpl& drafter, const model::DFlashBatch& batch, const model::DFlashBlocks& blocks);
  // Collective over `drafters` (comm::all_reduce_in_place, watched): every drafter's sums.
  HeldOutDraftQuality agree(MPI_Comm drafters) const;

 private:
  torch::Tensor loss_, correct_;  // fp64 scalar and int64 [B], on the device once added
  std::vector<std::int64_t> valid_;
  // Over the whole held-out pass of this drafter: its trivial drafters choose with hindsight
  // on all its held-out slots at once.
  model::TrivialDrafterCounts trivial_;
  double weight_ = 0;
  std::int64_t batches_ = 0, anchors_ = 0, tokens_ = 0;
};

}  // namespace topotrain
