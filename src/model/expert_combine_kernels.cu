// The MoE combine (a token's k expert outputs, weighted by its router weights) and its
// backward, one warp per token and 8 bf16 values per load. Torch ops needed a broadcast
// multiply, a reduction and, backward, two more of each over [tokens, k, hidden].
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace topotrain::model::kernels {
namespace {

constexpr int kWarps = 8;

__global__ void expert_combine_forward_kernel(const uint4* y, const float* weights, uint4* out, int64_t tokens, int k,
                                              int64_t vectors) {
  const int lane = threadIdx.x & 31;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * kWarps) {
    for (int64_t v = lane; v < vectors; v += 32) {
      float acc[kVector] = {};
      for (int j = 0; j < k; ++j) {
        const float w = weights[t * k + j];
        Bf16x8 in;
        in.raw = y[(t * k + j) * vectors + v];
#pragma unroll
        for (int e = 0; e < kVector; ++e) acc[e] += w * __bfloat162float(in.v[e]);
      }
      Bf16x8 o;
#pragma unroll
      for (int e = 0; e < kVector; ++e) o.v[e] = __float2bfloat16(acc[e]);
      out[t * vectors + v] = o.raw;
    }
  }
}

__global__ void expert_combine_backward_kernel(const uint4* y, const float* weights, const uint4* grad_out,
                                               uint4* grad_y, float* grad_weights, int64_t tokens, int k,
                                               int64_t vectors) {
  const int lane = threadIdx.x & 31;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * kWarps) {
    float dot[kMaxCombineChoices] = {};
    for (int64_t v = lane; v < vectors; v += 32) {
      Bf16x8 g;
      g.raw = grad_out[t * vectors + v];
      for (int j = 0; j < k; ++j) {
        const float w = weights[t * k + j];
        const int64_t at = (t * k + j) * vectors + v;
        Bf16x8 in, d;
        in.raw = y[at];
        float partial = 0.0f;
#pragma unroll
        for (int e = 0; e < kVector; ++e) {
          const float ge = __bfloat162float(g.v[e]);
          partial += ge * __bfloat162float(in.v[e]);
          d.v[e] = __float2bfloat16(w * ge);
        }
        dot[j] += partial;
        grad_y[at] = d.raw;
      }
    }
    for (int j = 0; j < k; ++j) {
      const float sum = warp_sum(dot[j]);
      if (lane == 0) grad_weights[t * k + j] = sum;
    }
  }
}

unsigned blocks_for(int64_t tokens) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((tokens + kWarps - 1) / kWarps, 4096)));
}

}  // namespace

cudaError_t expert_combine_forward(const void* y_bf16, const float* weights, void* out_bf16, int64_t tokens,
                                   int64_t k, int64_t hidden, cudaStream_t stream) {
  if (hidden % kVector != 0 || k < 1 || k > kMaxCombineChoices) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  expert_combine_forward_kernel<<<blocks_for(tokens), kWarps * 32, 0, stream>>>(
      static_cast<const uint4*>(y_bf16), weights, static_cast<uint4*>(out_bf16), tokens, static_cast<int>(k),
      hidden / kVector);
  return cudaGetLastError();
}

cudaError_t expert_combine_backward(const void* y_bf16, const float* weights, const void* grad_out_bf16,
                                    void* grad_y_bf16, float* grad_weights, int64_t tokens, int64_t k, int64_t hidden,
                                    cudaStream_t stream) {
  if (hidden % kVector != 0 || k < 1 || k > kMaxCombineChoices) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  expert_combine_backward_kernel<<<blocks_for(tokens), kWarps * 32, 0, stream>>>(
      static_cast<const uint4*>(y_bf16), weights, static_cast<const uint4*>(grad_out_bf16),
      static_cast<uint4*>(grad_y_bf16), grad_weights, tokens, static_cast<int>(k), hidden / kVector);
  return cudaGetLastError();
}

}  // namespace topotrain::model::kernels
