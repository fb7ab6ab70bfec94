// The mean next-token loss of a model over held-out documents (data.eval_path or
// data.eval_fraction), evaluated by the data-parallel ranks together: the documents are
// packed once, in file order, at the training token budget and dealt to the ranks as
// training micro-batches are (data/step_planner.h; pack_held_out, which dflash_train's
// targets share), so each rank runs the forward over its
// share with no gradient, and one all-reduce sums the loss. The count of targets divided
// by is known on every rank from the layout, so the result is the mean over every target
// of the set, whatever the number of ranks.
//
// Every rank of `group` calls evaluate() at the same steps (due() depends only on the
// step and the settings); it goes through comm::all_reduce_in_place, so a rank that never
// arrives is named by the watchdog.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "topotrain/batch/packed_batch.h"
#include "topotrain/data/token_dataset.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/train/run_config.h"

namespace topotrain {

struct HeldOutLoss {
  double loss = 0;             // mean over every next-token target of the held-out set
  std::uint64_t targets = 0;   // next-token targets in the set
  std::uint64_t tokens = 0;
  std::uint64_t documents = 0;
};

// The held-out documents as every job packs them: one pass in file order at `token_budget`,
// micro-batches dealt to `world` ranks as training's are; this rank's non-empty batches (on
// the host) and the counts of the whole set (loss 0). Throws ConfigError when the set has no
// next-token target.
struct HeldOutShare {
  std::vector<PackedBatch> batches;
  HeldOutLoss totals;
};
HeldOutShare pack_held_out(std::shared_ptr<const data::TokenDataset> documents, const RunConfig& config,
                           std::int64_t token_budget, int rank, int world, bool pin_memory);

// Whether an evaluation falls due after step `step`: every `eval_every` steps (0: never
// on a cadence), and after the run's last step.
bool held_out_due(std::int64_t eval_every, std::int64_t step, bool last);

class HeldOutEval {
 public:
  HeldOutEval(std::shared_ptr<const data::TokenDataset> documents, const RunConfig& config, std::int64_t token_budget,
              int rank, int world, const torch::Device& device);

  // held_out_due at train.eval_every.
  bool due(std::int64_t step, bool last) const;
  // Collective over `group` (the data-parallel ranks).
  HeldOutLoss evaluate(model::CausalLMImpl& net, MPI_Comm group) const;

 private:
  std::vector<PackedBatch> mine_;  // this rank's micro-batches, on the host
  HeldOutLoss totals_;             // the set's counts (loss 0)
  std::int64_t every_ = 0;
  torch::Device device_;
};

}  // namespace topotrain
