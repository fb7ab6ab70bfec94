// Gradient clipping by global L2 norm, kept on the device: the squared norm and the factor
// AdamW multiplies the gradients by are tensors where the gradients are, and AdamW reads the
// factor there (AdamW::step(lr, tensor)), so that clipping never makes the host wait:
//   squared_gradient_norm  (enqueued after the GradReducer summed the gradients) ->
//   gradient_factor -> AdamW::step; the host reads the norm later, with the step's sums.
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

// What AdamW multiplies the summed gradients by, as an fp64 scalar where `norm_squared` is:
// 1 / divisor (the loss's normalisation), times max_norm / (norm + 1e-6) where max_norm > 0
// and the norm of the divided gradients, norm = sqrt(norm_squared) / divisor, exceeds it.
// NaN (AdamW then skips the step) when that norm or any value of `must_be_finite` (tensors
// on the same device, e.g. the step's loss sums) is not finite. Nothing is read back: each
// operation is the IEEE fp64 one the host would do, so the host, reading the norm later,
// computes the same norm and decides the same skip.
torch::Tensor gradient_factor(const torch::Tensor& norm_squared, double divisor, double max_norm,
                              const std::vector<torch::Tensor>& must_be_finite);

}  // namespace topotrain
