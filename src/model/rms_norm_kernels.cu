// RMSNorm over hidden-size rows, optionally fused with the residual add before it.
//
// A block per row (grid-stride over rows); each thread keeps up to V 8-value vectors of its
// row in registers, so a row is read once. The backward accumulates each thread's share of
// the weight gradient over all rows its block visits and writes one partial per block.
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace topotrain::model::kernels {
namespace {

constexpr int kMaxBlocks = 1024;

// Sum over the block; every thread gets the total. `scratch` holds one float per warp.
__device__ inline float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  __syncthreads();  // scratch may still be read from the previous call
  if ((threadIdx.x & 31) == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}

template <int V>
__global__ void rms_norm_forward_kernel(const uint4* x, const uint4* residual, const float* weight, uint4* sum_out,
                                        uint4* y, float* rstd_out, int64_t rows, int vectors, float eps) {
  __shared__ float scratch[32];
  const int hidden = vectors * kVector;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float s[V][kVector];
    float squares = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int v = threadIdx.x + i * blockDim.x;
      if (v >= vectors) continue;
      Bf16x8 a;
      a.raw = x[row * vectors + v];
      if (residual != nullptr) {
        Bf16x8 b, sum;
        b.raw = residual[row * vectors + v];
#pragma unroll
        for (int e = 0; e < kVector; ++e) sum.v[e] = __float2bfloat16(__bfloat162float(a.v[e]) + __bfloat162float(b.v[e]));
        sum_out[row * vectors + v] = sum.raw;
        a = sum;
      }
#pragma unroll
      for (int e = 0; e < kVector; ++e) {
        s[i][e] = __bfloat162float(a.v[e]);
        squares += s[i][e] * s[i][e];
      }
    }
    const float rstd = rsqrtf(block_sum(squares, scratch) / hidden + eps);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int v = threadIdx.x + i * blockDim.x;
      if (v >= vectors) continue;
      Bf16x8 out;
#pragma unroll
      for (int e = 0; e < kVector; ++e) out.v[e] = __float2bfloat16(s[i][e] * rstd * weight[v * kVector + e]);
      y[row * vectors + v] = out.raw;
    }
    if (threadIdx.x == 0) rstd_out[row] = rstd;
  }
}

template <int V>
__global__ void rms_norm_backward_kernel(const uint4* s_in, const float* weight, const float* rstd_in,
                                         const uint4* grad_y, const uint4* grad_sum, uint4* grad_x,
                                         float* weight_grad_partials, int64_t rows, int vectors) {
  __shared__ float scratch[32];
  const int hidden = vectors * kVector;
  float dw[V][kVector] = {};
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float rstd = rstd_in[row];
    float xhat[V][kVector], dxhat[V][kVector];
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int v = threadIdx.x + i * blockDim.x;
      if (v >= vectors) continue;
      Bf16x8 s, g;
      s.raw = s_in[row * vectors + v];
      g.raw = grad_y[row * vectors + v];
#pragma unroll
      for (int e = 0; e < kVector; ++e) {
        const float ge = __bfloat162float(g.v[e]);
        xhat[i][e] = __bfloat162float(s.v[e]) * rstd;
        dxhat[i][e] = ge * weight[v * kVector + e];
        dw[i][e] += ge * xhat[i][e];
        dot += dxhat[i][e] * xhat[i][e];
      }
    }
    const float mean_dot = block_sum(dot, scratch) / hidden;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int v = threadIdx.x + i * blockDim.x;
      if (v >= vectors) continue;
      Bf16x8 extra, out;
      if (grad_sum != nullptr) extra.raw = grad_sum[row * vectors + v];
#pragma unroll
      for (int e = 0; e < kVector; ++e) {
        const float add = grad_sum != nullptr ? __bfloat162float(extra.v[e]) : 0.0f;
        out.v[e] = __float2bfloat16(rstd * (dxhat[i][e] - xhat[i][e] * mean_dot) + add);
      }
      grad_x[row * vectors + v] = out.raw;
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v >= vectors) continue;
#pragma unroll
    for (int e = 0; e < kVector; ++e) weight_grad_partials[blockIdx.x * static_cast<int64_t>(hidden) + v * kVector + e] = dw[i][e];
  }
}

// Threads per block: one per vector up to 256 (whole warps), then V vectors per thread, V in
// {1, 2, 4} (3 rounds up: one kernel instance fewer, the spare registers unused).
struct Shape {
  int threads, per_thread;
};
Shape shape_for(int64_t hidden) {
  const int vectors = static_cast<int>(hidden / kVector);
  const int threads = std::min(256, (vectors + 31) / 32 * 32);
  const int per_thread = (vectors + threads - 1) / threads;
  return {threads, per_thread == 3 ? 4 : per_thread};
}

int blocks_for(int64_t rows) { return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(rows, kMaxBlocks))); }

}  // namespace

int64_t rms_norm_backward_blocks(int64_t rows) { return blocks_for(rows); }

cudaError_t rms_norm_forward(const void* x_bf16, const void* residual_bf16, const float* weight, void* sum_out_bf16,
                             void* y_bf16, float* rstd, int64_t rows, int64_t hidden, float eps, cudaStream_t stream) {
  if (hidden % kVector != 0 || hidden > 8192 || (residual_bf16 == nullptr) != (sum_out_bf16 == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  const Shape shape = shape_for(hidden);
  return launch_for<1, 2, 4>(shape.per_thread, [&](auto v) {
    rms_norm_forward_kernel<decltype(v)::value><<<blocks_for(rows), shape.threads, 0, stream>>>(
        static_cast<const uint4*>(x_bf16), static_cast<const uint4*>(residual_bf16), weight,
        static_cast<uint4*>(sum_out_bf16), static_cast<uint4*>(y_bf16), rstd, rows,
        static_cast<int>(hidden / kVector), eps);
  });
}

cudaError_t rms_norm_backward(const void* s_bf16, const float* weight, const float* rstd, const void* grad_y_bf16,
                              const void* grad_sum_bf16, void* grad_x_bf16, float* weight_grad_partials, int64_t rows,
                              int64_t hidden, cudaStream_t stream) {
  if (hidden % kVector != 0 || hidden > 8192) return cudaErrorInvalidValue;
  const Shape shape = shape_for(hidden);
  return launch_for<1, 2, 4>(shape.per_thread, [&](auto v) {
    rms_norm_backward_kernel<decltype(v)::value><<<blocks_for(rows), shape.threads, 0, stream>>>(
        static_cast<const uint4*>(s_bf16), weight, rstd, static_cast<const uint4*>(grad_y_bf16),
        static_cast<const uint4*>(grad_sum_bf16), static_cast<uint4*>(grad_x_bf16), weight_grad_partials, rows,
        static_cast<int>(hidden / kVector));
  });
}

}  // namespace topotrain::model::kernels
