// Where a training run stands: its step, the tokens trained, where its data stands and the
// training set that position counts in. Stored in every checkpoint; a resume starts from it.
#pragma once

#include <cstdint>
#include <vector>

#include "topotrain/data/data_position.h"
#include "topotrain/train/training_set_identity.h"

namespace topotrain {

struct TrainingState {
  std::int64_t step = 0;
  std::int64_t tokens = 0;  // global tokens trained so far (the LR schedule's default clock)
  data::DataPosition data;
  // Pipelines (dflash_train): where each target's own sample stream stands, counting only
  // batches a drafter has trained on. Empty for moe_train.
  std::vector<data::DataPosition> streams;
  // The training set the data position counts in; unknown parts are not compared.
  TrainingSetIdentity data_set;
  // What train.token_budget = "auto" measured at this launch, kept in checkpoints for the
  // record; a resume measures again and does not read it. Budget 0: a fixed budget.
  struct BudgetRecord {
    std::int64_t budget = 0;
    double bytes_per_token = 0;
  };
  BudgetRecord measured_budget;
};

// A fresh run's state: step 0, the data at the start of epoch 0 of the sample order `seed` draws.
inline TrainingState initial_state(std::uint64_t seed) {
  TrainingState state;
  state.data.seed = seed;
  return state;
}

}  // namespace topotrain
