// fp32 += bf16 in one pass: a master weight's gradient added where it accumulates, without an
// fp32 copy of the bf16 gradient first (model/accumulate_into_grad.h).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace topotrain::model::kernels {
namespace {

constexpr int kThreads = 256;

// Vector i covers values [8i, 8i + 8): one 16-byte load of the gradient, two of the sum.
__global__ void accumulate_bf16_kernel(float4* sum, const uint4* grad, int64_t vectors) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vectors;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Bf16x8 g;
    g.raw = grad[i];
    float4 lo = sum[2 * i], hi = sum[2 * i + 1];
    lo.x += __bfloat162float(g.v[0]);
    lo.y += __bfloat162float(g.v[1]);
    lo.z += __bfloat162float(g.v[2]);
    lo.w += __bfloat162float(g.v[3]);
    hi.x += __bfloat162float(g.v[4]);
    hi.y += __bfloat162float(g.v[5]);
    hi.z += __bfloat162float(g.v[6]);
    hi.w += __bfloat162float(g.v[7]);
    sum[2 * i] = lo;
    sum[2 * i + 1] = hi;
  }
}

}  // namespace

cudaError_t accumulate_bf16(float* sum, const void* grad_bf16, int64_t n, cudaStream_t stream) {
  const int64_t vectors = n / kVector;
  if (vectors == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((vectors + kThreads - 1) / kThreads, 16384));
  accumulate_bf16_kernel<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<float4*>(sum),
                                                         static_cast<const uint4*>(grad_bf16), vectors);
  return cudaGetLastError();
}

}  // namespace topotrain::model::kernels
