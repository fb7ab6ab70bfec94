// The CUDA side of AdamW (train/adamw.h): one launch updates every parameter. No torch here:
// the .cu file compiles with nvcc alone; AdamW passes raw pointers.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace topotrain::kernels {

// Elements a block updates at a time; a tensor spans ceil(numel / kAdamWChunk) chunks.
constexpr std::int64_t kAdamWChunk = 16384;

// One parameter with its gradient and moments: fp32, contiguous, numel elements each.
struct AdamWTensor {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  std::int64_t numel;
  std::int64_t first_chunk;  // chunks of the tensors before this one in the table
  int decays;                // 1: weight decay applies
  int aligned;               // 1: all four pointers 16-byte aligned (vector loads)
};

// The step's scalars, computed on the host in double and rounded once.
struct AdamWScalars {
  float beta1, beta2, eps;
  float decay;                  // lr * weight_decay (for tensors that decay)
  float step_size;              // lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float grad_factor;            // what each gradient is multiplied by as it is read
};

// tensors: a device array of `count` entries in first_chunk order, `chunks` in all. For each
// element, with g = grad * grad_factor:
//   param -= decay * param; exp_avg = beta1 exp_avg + (1 - beta1) g;
//   exp_avg_sq = beta2 exp_avg_sq + (1 - beta2) g^2;
//   param -= step_size * exp_avg / (sqrt(exp_avg_sq) / bias_correction2_sqrt + eps)
// The gradients are read only. With `device_grad_factor` (a device fp64 scalar, read when the
// kernel runs) grad_factor is that value rounded to fp32, and where it is not finite the
// kernel changes nothing: the factor can then be computed on the device, the step's skip
// included, without the host waiting for it.
cudaError_t adamw_step(const AdamWTensor* tensors, int count, std::int64_t chunks, const AdamWScalars& scalars,
                       const double* device_grad_factor, cudaStream_t stream);

}  // namespace topotrain::kernels
