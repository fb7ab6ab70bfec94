// Gradient clipping by global L2 norm, in two halves around the step's agreement, so that
// the host reads the norm in the one device read the agreement makes anyway:
//   squared_gradient_norm  (enqueued after the GradReducer summed the gradients) ->
//   read with the step's sums -> clip_factor on the host -> AdamW::step's grad_factor.
//
// After the reducer, every data-parallel rank holds the same gradients: the local norm is
// then already the global one, and no collective is needed.
#pragma once

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

namespace topotrain {

// The squared L2 norm of every defined gradient as an fp64 scalar on their device, from
// fused per-tensor norms (one multi-tensor launch, not two kernels per tensor); nothing is
// read back. An undefined tensor when no parameter has a gradient.
torch::Tensor squared_gradient_norm(const std::vector<std::pair<std::string, torch::Tensor>>& parameters);

// What to multiply the gradients by so that their norm is at most max_norm: 1 when
// max_norm <= 0 or the norm is within it.
double clip_factor(double norm, double max_norm);

}  // namespace topotrain
