// The MoE combine (a token's k expert outputs, weighted by its router weights, read where the
// grouped GEMM left them, in expert order) and its backward, and the dispatch's backward (a
// token's k row gradients summed); one warp per token and 8 bf16 values per load. Reading the
// rows through the permutation fuses away a gather over [tokens * k, hidden] each way, which
// at top-8 cost as much as the combine itself.
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace topotrain::model::kernels {
namespace {

constexpr int kWarps = 8;

// The rows of a token's k choices, read once per warp (every lane reads the same address).
__device__ inline void token_rows(const int64_t* rows, int64_t t, int k, int64_t (&out)[kMaxCombineChoices]) {
#pragma unroll
  for (int j = 0; j < kMaxCombineChoices; ++j) out[j] = j < k ? rows[t * k + j] : 0;
}

__global__ void gather_rows_sum_kernel(const uint4* src, const int64_t* rows, const float* weights, uint4* out,
                                       int64_t tokens, int k, int64_t vectors) {
  const int lane = threadIdx.x & 31;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * kWarps) {
    int64_t r[kMaxCombineChoices];
    token_rows(rows, t, k, r);
    float w[kMaxCombineChoices];
#pragma unroll
    for (int j = 0; j < kMaxCombineChoices; ++j) w[j] = j < k ? (weights ? weights[t * k + j] : 1.0f) : 0.0f;
    for (int64_t v = lane; v < vectors; v += 32) {
      float acc[kVector] = {};
#pragma unroll
      for (int j = 0; j < kMaxCombineChoices; ++j) {
        if (j >= k) break;
        Bf16x8 in;
        in.raw = src[r[j] * vectors + v];
#pragma unroll
        for (int e = 0; e < kVector; ++e) acc[e] += w[j] * __bfloat162float(in.v[e]);
      }
      Bf16x8 o;
#pragma unroll
      for (int e = 0; e < kVector; ++e) o.v[e] = __float2bfloat16(acc[e]);
      out[t * vectors + v] = o.raw;
    }
  }
}

__global__ void expert_combine_backward_kernel(const uint4* y_rows, const int64_t* rows, const float* weights,
                                               const uint4* grad_out, uint4* grad_y_rows, float* grad_weights,
                                               int64_t tokens, int k, int64_t vectors) {
  const int lane = threadIdx.x & 31;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * kWarps) {
    int64_t r[kMaxCombineChoices];
    token_rows(rows, t, k, r);
    float dot[kMaxCombineChoices] = {};
    for (int64_t v = lane; v < vectors; v += 32) {
      Bf16x8 g;
      g.raw = grad_out[t * vectors + v];
#pragma unroll
      for (int j = 0; j < kMaxCombineChoices; ++j) {
        if (j >= k) break;
        const float w = weights[t * k + j];
        const int64_t at = r[j] * vectors + v;
        Bf16x8 in, d;
        in.raw = y_rows[at];
        float partial = 0.0f;
#pragma unroll
        for (int e = 0; e < kVector; ++e) {
          const float ge = __bfloat162float(g.v[e]);
          partial += ge * __bfloat162float(in.v[e]);
          d.v[e] = __float2bfloat16(w * ge);
        }
        dot[j] += partial;
        grad_y_rows[at] = d.raw;
      }
    }
#pragma unroll
    for (int j = 0; j < kMaxCombineChoices; ++j) {
      if (j >= k) break;
      const float sum = warp_sum(dot[j]);
      if (lane == 0) grad_weights[t * k + j] = sum;
    }
  }
}

unsigned blocks_for(int64_t tokens) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((tokens + kWarps - 1) / kWarps, 4096)));
}

}  // namespace

cudaError_t gather_rows_sum(const void* src_bf16, const int64_t* rows, const float* weights, void* out_bf16,
                            int64_t tokens, int64_t k, int64_t hidden, cudaStream_t stream) {
  if (hidden % kVector != 0 || k < 1 || k > kMaxCombineChoices) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  gather_rows_sum_kernel<<<blocks_for(tokens), kWarps * 32, 0, stream>>>(
      static_cast<const uint4*>(src_bf16), rows, weights, static_cast<uint4*>(out_bf16), tokens, static_cast<int>(k),
      hidden / kVector);
  return cudaGetLastError();
}

cudaError_t expert_combine_backward(const void* y_rows_bf16, const int64_t* rows, const float* weights,
                                    const void* grad_out_bf16, void* grad_y_rows_bf16, float* grad_weights,
                                    int64_t tokens, int64_t k, int64_t hidden, cudaStream_t stream) {
  if (hidden % kVector != 0 || k < 1 || k > kMaxCombineChoices) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  expert_combine_backward_kernel<<<blocks_for(tokens), kWarps * 32, 0, stream>>>(
      static_cast<const uint4*>(y_rows_bf16), rows, weights, static_cast<const uint4*>(grad_out_bf16),
      static_cast<uint4*>(grad_y_rows_bf16), grad_weights, tokens, static_cast<int>(k), hidden / kVector);
  return cudaGetLastError();
}

}  // namespace topotrain::model::kernels
