// RMSNorm as HF computes it, and fused with the residual add in front of it.
#pragma once

#include <torch/torch.h>

namespace topotrain::model {

// Normalise in fp32, return to the input dtype, scale by `weight` (cast to the input dtype).
// On CUDA with bf16 rows (hidden % 8 == 0, <= 8192) and an fp32 weight, our kernel (a block
// per row, the weight gradient from per-block partials); elsewhere torch's fused kernel where
// it has one (at::rms_norm on CUDA), else torch ops. The kernels round once, after scaling.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// The pre-norm residual step: sum = x + residual (the residual stream's next value) and
// normed = rms_norm(sum). One kernel each way where rms_norm's kernel applies, so the add and
// the gradient the sum gets from its other uses ride along with the norm.
struct NormedSum {
  torch::Tensor sum, normed;
};
NormedSum add_rms_norm(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight, double eps);

}  // namespace topotrain::model
