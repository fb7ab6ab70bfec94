// The mean next-token loss of a model over held-out documents (data.eval_path or
// data.eval_fraction), evaluated by the data-parallel ranks together: the documents are
// packed once, in file order, at the training token budget and dealt to the ranks as
// training micro-batches are (data/step_planner.h), so each rank runs the forward over its
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
#include "topotrain/model/qwen3.h"
#include "topotrain/train/run_config.h"

namespace topotrain {

struct HeldOutLoss {
  double loss = 0;             // mean over every next-token target of the held-out set
  std::uint64_t targets = 0;   // next-token targets in the set
  std::uint64_t tokens = 0;
  std::uint64_t documents = 0;
};

class HeldOutEval {
 public:
  HeldOutEval(std::shared_ptr<const data::TokenDataset> documents, const RunConfig& config, std::int64_t token_budget,
              int rank, int world, const torch::Device& device);

  // After step `step`: every train.eval_every steps, and after the run's last step.
  bool due(std::int64_t step, bool last) const;
  // Collective over `group` (the data-parallel ranks).
  HeldOutLoss evaluate(model::Qwen3CausalLMImpl& net, MPI_Comm group) const;

 private:
  std::vector<PackedBatch> mine_;  // this rank's micro-batches, on the host
  HeldOutLoss totals_;             // the set's counts (loss 0)
  std::int64_t every_ = 0;
  torch::Device device_;
};

}  // namespace topotrain
