#include "topotrain/infer/constant_proposer.h"

#include <stdexcept>

#include "topotrain/core/error.h"

namespace topotrain::infer {

ConstantProposer::ConstantProposer(int64_t block_size, int64_t token) : block_size_(block_size), token_(token) {
  if (block_size < 2 || token < 0)
    throw std::invalid_argument(cat("ConstantProposer: block size ", block_size, " and token ", token,
                                    " (need >= 2 and >= 0)"));
}

torch::Tensor ConstantProposer::propose(int64_t /*next*/) {
  return torch::full({block_size_ - 1}, token_, torch::kInt64);
}

}  // namespace topotrain::infer
