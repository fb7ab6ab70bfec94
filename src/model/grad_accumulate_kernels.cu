// fp32 += bf16: a master weight's gradient added where it accumulates, without an fp32 copy of
// the bf16 gradient first (model/accumulate_into_grad.h): a whole tensor in one pass, its rows in
// another order (a compute copy laid out by model/compute_weight.h), or rows gathered by index
// (an embedding table's).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace topotrain::model::kernels {
namespace {

constexpr int kThreads = 256;

// out[0..1] (8 fp32 values, two 16-byte vectors) += v.
__device__ inline void add_eight(float4* out, const float (&v)[kVector]) {
  float4 lo = out[0], hi = out[1];
  lo.x += v[0];
  lo.y += v[1];
  lo.z += v[2];
  lo.w += v[3];
  hi.x += v[4];
  hi.y += v[5];
  hi.z += v[6];
  hi.w += v[7];
  out[0] = lo;
  out[1] = hi;
}

// Vector i covers values [8i, 8i + 8) of grad row i / per_row: one 16-byte load of the gradient,
// two of the sum, added into sum row rows[i / per_row] (rows null: the same row). A permutation
// writes every sum value once, so no two threads meet.
__global__ void accumulate_bf16_kernel(float4* sum, const uint4* grad, const int64_t* rows, int64_t per_row,
                                       int64_t vectors) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vectors;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v[kVector];
    bf16x8_to_floats(grad[i], v);
    int64_t at = i;
    if (rows) {
      const int64_t row = i / per_row;
      at = rows[row] * per_row + (i - row * per_row);
    }
    add_eight(sum + 2 * at, v);
  }
}

cudaError_t launch_accumulate_bf16(float* sum, const void* grad_bf16, const int64_t* rows, int64_t per_row,
                                   int64_t vectors, cudaStream_t stream) {
  if (vectors == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((vectors + kThreads - 1) / kThreads, 16384));
  accumulate_bf16_kernel<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<float4*>(sum),
                                                         static_cast<const uint4*>(grad_bf16), rows, per_row, vectors);
  return cudaGetLastError();
}

// One warp per position of the sorted row indices. The warp at the first position of a run of
// one row sums the run's gradient rows in position order (a fixed order: deterministic, no
// atomics), 8 columns per lane and pass, and adds the sum into that row.
__global__ void accumulate_bf16_rows_kernel(float4* sum, const uint4* grad, const int64_t* sorted_rows,
                                            const int64_t* order, int64_t n, int64_t vectors) {
  const int64_t at = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (at >= n) return;
  const int64_t row = sorted_rows[at];
  if (at > 0 && sorted_rows[at - 1] == row) return;
  int64_t end = at + 1;
  while (end < n && sorted_rows[end] == row) ++end;
  for (int64_t v = lane; v < vectors; v += 32) {
    float acc[kVector] = {};
    for (int64_t j = at; j < end; ++j) {
      Bf16x8 g;
      g.raw = grad[order[j] * vectors + v];
#pragma unroll
      for (int k = 0; k < kVector; ++k) acc[k] += __bfloat162float(g.v[k]);
    }
    add_eight(sum + 2 * (row * vectors + v), acc);
  }
}

}  // namespace

cudaError_t accumulate_bf16_rows(float* sum, const void* grad_bf16, const int64_t* sorted_rows, const int64_t* order,
                                 int64_t n, int64_t columns, cudaStream_t stream) {
  if (n == 0 || columns == 0) return cudaSuccess;
  constexpr int64_t kWarpsPerBlock = kThreads / 32;
  const auto blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  accumulate_bf16_rows_kernel<<<blocks, kThreads, 0, stream>>>(
      reinterpret_cast<float4*>(sum), static_cast<const uint4*>(grad_bf16), sorted_rows, order, n, columns / kVector);
  return cudaGetLastError();
}

cudaError_t accumulate_bf16(float* sum, const void* grad_bf16, int64_t n, cudaStream_t stream) {
  return launch_accumulate_bf16(sum, grad_bf16, nullptr, /*per_row=*/1, n / kVector, stream);  // no rows: unused
}

cudaError_t accumulate_bf16_permuted(float* sum, const void* grad_bf16, const int64_t* rows, int64_t n,
                                     int64_t columns, cudaStream_t stream) {
  return launch_accumulate_bf16(sum, grad_bf16, rows, columns / kVector, n * (columns / kVector), stream);
}

}  // namespace topotrain::model::kernels
