// A stacked weight's bf16 compute copy cast from its fp32 master with its rows (experts) in
// another order: the one pass the cast makes anyway, reading through the row index, so that
// laying the experts out busiest first costs no kernel of its own (model/compute_weight.h; the
// gradient goes back through grad_accumulate_kernels.cu's accumulate_bf16_permuted).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace topotrain::model::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 16384;

unsigned blocks_for(int64_t vectors) {
  return static_cast<unsigned>(std::min<int64_t>((vectors + kThreads - 1) / kThreads, kMaxBlocks));
}

// Vector i of dst covers values [8i, 8i + 8) of dst row i / per_row.
__global__ void cast_rows_bf16_kernel(const float4* src, const int64_t* rows, uint4* dst, int64_t per_row,
                                      int64_t vectors) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vectors;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / per_row;
    const float4* in = src + 2 * (rows[row] * per_row + (i - row * per_row));
    const float4 lo = in[0], hi = in[1];
    const float v[kVector] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    Bf16x8 out;
#pragma unroll
    for (int k = 0; k < kVector; ++k) out.v[k] = __float2bfloat16_rn(v[k]);
    dst[i] = out.raw;
  }
}

}  // namespace

cudaError_t cast_rows_bf16(const float* src, const int64_t* rows, void* dst_bf16, int64_t n, int64_t columns,
                           cudaStream_t stream) {
  const int64_t per_row = columns / kVector, vectors = n * per_row;
  if (vectors == 0) return cudaSuccess;
  cast_rows_bf16_kernel<<<blocks_for(vectors), kThreads, 0, stream>>>(
      reinterpret_cast<const float4*>(src), rows, static_cast<uint4*>(dst_bf16), per_row, vectors);
  return cudaGetLastError();
}

}  // namespace topotrain::model::kernels
