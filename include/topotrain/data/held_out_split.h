// A dataset split into the documents a run trains on and those it holds out for
// evaluation (data.eval_fraction). Which documents are held out depends only on the seed,
// the fraction and the number of documents, so every rank, and every launch of a resumed
// run, draws the same split; the training data's sample indices (and so the data position
// a checkpoint stores) are those of the documents left, in their file order.
#pragma once

#include <cstdint>

#include "topotrain/data/token_dataset.h"

namespace topotrain::data {

struct HeldOutSplit {
  TokenDataset train;
  TokenDataset held_out;
};

// Holds out round(fraction x documents) documents, at least one, drawn by a seeded
// permutation. `dataset` is consumed: the kept documents are compacted in its memory, so
// the split costs only the held-out part on top of the dataset. Throws ConfigError naming
// data.eval_fraction when the fraction would hold out every document, or every document with
// a next-token target (TokenDataset::num_loss_targets), or the dataset has fewer than two.
HeldOutSplit split_held_out(TokenDataset dataset, double fraction, std::uint64_t seed);

}  // namespace topotrain::data
