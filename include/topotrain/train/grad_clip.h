// Gradient clipping by global L2 norm.
//
// Called after the GradReducer has summed the gradients, when every data-parallel rank
// holds the same gradients: the local norm is then already the global one, and no
// collective is needed.
#pragma once

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

namespace topotrain {

// Scales the gradients so their norm is at most max_norm (no-op when max_norm <= 0) and
// returns the norm before clipping.
double clip_gradients(const std::vector<std::pair<std::string, torch::Tensor>>& parameters, double max_norm);

}  // namespace topotrain
