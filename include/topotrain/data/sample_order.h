// The order in which one epoch visits the samples: a permutation that depends only on
// (seed, epoch, number of samples), identical on every rank, machine and compiler. It
// uses its own generator and bounded draw rather than std::shuffle, whose result is
// implementation-defined.
#pragma once

#include <cstdint>
#include <vector>

namespace topotrain::data {

std::vector<uint64_t> epoch_permutation(uint64_t seed, uint64_t epoch, uint64_t num_samples, bool shuffle);

}  // namespace topotrain::data
