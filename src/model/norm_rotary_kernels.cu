// Per-head RMSNorm + rotate-half RoPE, one warp per (token, head) row.
//
// Layout in registers: lane l holds the E = head_dim / 32 consecutive values starting at
// l * E, so the first half of the row lives in lanes 0-15 and the second half in lanes
// 16-31, and the rotate-half partner of a lane's value k is value k of lane l ^ 16.
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace topotrain::model::kernels {
namespace {

constexpr int kWarps = 8;  // rows per block at a time

template <int E>
struct RowView {
  int64_t token, head;
  int first;  // index of this lane's first value in the row
  __device__ RowView(int64_t row, int64_t heads, int lane) : token(row / heads), head(row % heads), first(lane * E) {}
};

template <int E>
__device__ inline void load(const __nv_bfloat16* p, float (&v)[E]) {
#pragma unroll
  for (int k = 0; k < E; ++k) v[k] = __bfloat162float(p[k]);
}

// y = n * cos + rotate_half(n) * sin with n = x * rstd * w; rotate_half(n) = [-n2, n1].
template <int E>
__global__ void norm_rotary_forward_kernel(const __nv_bfloat16* x, int64_t x_token_stride, const float* weight,
                                           const __nv_bfloat16* cos, const __nv_bfloat16* sin, __nv_bfloat16* y,
                                           float* rstd_out, int64_t rows, int64_t heads, float eps) {
  constexpr int D = 32 * E;
  const int lane = threadIdx.x & 31;
  const bool first_half = lane < 16;
  const int64_t warp = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32;
  for (int64_t row = warp; row < rows; row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const RowView<E> at(row, heads, lane);
    float v[E], c[E], s[E];
    load<E>(x + at.token * x_token_stride + at.head * D + at.first, v);
    load<E>(cos + at.token * D + at.first, c);
    load<E>(sin + at.token * D + at.first, s);
    float squares = 0.0f;
#pragma unroll
    for (int k = 0; k < E; ++k) squares += v[k] * v[k];
    const float rstd = rsqrtf(warp_sum(squares) / D + eps);
    float n[E];
#pragma unroll
    for (int k = 0; k < E; ++k) n[k] = v[k] * rstd * weight[at.first + k];
    __nv_bfloat16* out = y + row * D + at.first;
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const float partner = __shfl_xor_sync(kAllLanes, n[k], 16);
      out[k] = __float2bfloat16(n[k] * c[k] + (first_half ? -partner : partner) * s[k]);
    }
    if (lane == 0) rstd_out[row] = rstd;
  }
}

// With g = dL/dy: dL/dn = g * cos + (first half ? g2 * sin2 : -g1 * sin1), then RMSNorm's
// backward: dx = rstd * (dn * w - xhat * mean(dn * w * xhat)), dw = sum over rows dn * xhat.
template <int E>
__global__ void norm_rotary_backward_kernel(const __nv_bfloat16* x, int64_t x_token_stride, const float* weight,
                                            const __nv_bfloat16* cos, const __nv_bfloat16* sin, const float* rstd_in,
                                            const __nv_bfloat16* grad_y, __nv_bfloat16* grad_x,
                                            int64_t grad_x_token_stride, float* weight_grad_partials, int64_t rows,
                                            int64_t heads) {
  constexpr int D = 32 * E;
  __shared__ float block_dw[kWarps][D];
  const int lane = threadIdx.x & 31, warp_in_block = threadIdx.x / 32;
  const bool first_half = lane < 16;
  float dw[E] = {};
  const int64_t warp = blockIdx.x * static_cast<int64_t>(kWarps) + warp_in_block;
  for (int64_t row = warp; row < rows; row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const RowView<E> at(row, heads, lane);
    float v[E], c[E], s[E], g[E];
    load<E>(x + at.token * x_token_stride + at.head * D + at.first, v);
    load<E>(cos + at.token * D + at.first, c);
    load<E>(sin + at.token * D + at.first, s);
    load<E>(grad_y + row * D + at.first, g);
    const float rstd = rstd_in[row];
    float xhat[E], dxhat[E], dot = 0.0f;
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const float partner = __shfl_xor_sync(kAllLanes, g[k] * s[k], 16);
      const float dn = g[k] * c[k] + (first_half ? partner : -partner);
      xhat[k] = v[k] * rstd;
      dxhat[k] = dn * weight[at.first + k];
      dw[k] += dn * xhat[k];
      dot += dxhat[k] * xhat[k];
    }
    const float mean_dot = warp_sum(dot) / D;
    __nv_bfloat16* out = grad_x + at.token * grad_x_token_stride + at.head * D + at.first;
#pragma unroll
    for (int k = 0; k < E; ++k) out[k] = __float2bfloat16(rstd * (dxhat[k] - xhat[k] * mean_dot));
  }
#pragma unroll
  for (int k = 0; k < E; ++k) block_dw[warp_in_block][lane * E + k] = dw[k];
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += block_dw[w][d];
    weight_grad_partials[blockIdx.x * static_cast<int64_t>(D) + d] = sum;
  }
}

int64_t blocks_for(int64_t rows) { return std::max<int64_t>(1, std::min<int64_t>((rows + kWarps - 1) / kWarps, 2048)); }

// E = head_dim / 32 values per lane; the rotate-half pairing needs E even.
template <typename Launch>
cudaError_t launch_for_head_dim(int64_t head_dim, Launch&& launch) {
  if (head_dim % 32 != 0) return cudaErrorInvalidValue;
  return launch_for<2, 4, 6, 8>(static_cast<int>(head_dim / 32), launch);
}

}  // namespace

int64_t norm_rotary_backward_blocks(int64_t tokens, int64_t heads) { return blocks_for(tokens * heads); }

cudaError_t norm_rotary_forward(const void* x_bf16, int64_t x_token_stride, const float* weight, const void* cos_bf16,
                                const void* sin_bf16, void* y_bf16, float* rstd, int64_t tokens, int64_t heads,
                                int64_t head_dim, float eps, cudaStream_t stream) {
  const int64_t rows = tokens * heads;
  if (rows == 0) return cudaSuccess;
  return launch_for_head_dim(head_dim, [&](auto e) {
    norm_rotary_forward_kernel<decltype(e)::value><<<blocks_for(rows), kWarps * 32, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x_bf16), x_token_stride, weight, static_cast<const __nv_bfloat16*>(cos_bf16),
        static_cast<const __nv_bfloat16*>(sin_bf16), static_cast<__nv_bfloat16*>(y_bf16), rstd, rows, heads, eps);
  });
}

cudaError_t norm_rotary_backward(const void* x_bf16, int64_t x_token_stride, const float* weight, const void* cos_bf16,
                                 const void* sin_bf16, const float* rstd, const void* grad_y_bf16, void* grad_x_bf16,
                                 int64_t grad_x_token_stride, float* weight_grad_partials, int64_t tokens,
                                 int64_t heads, int64_t head_dim, cudaStream_t stream) {
  const int64_t rows = tokens * heads;
  return launch_for_head_dim(head_dim, [&](auto e) {
    norm_rotary_backward_kernel<decltype(e)::value><<<blocks_for(rows), kWarps * 32, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x_bf16), x_token_stride, weight, static_cast<const __nv_bfloat16*>(cos_bf16),
        static_cast<const __nv_bfloat16*>(sin_bf16), rstd, static_cast<const __nv_bfloat16*>(grad_y_bf16),
        static_cast<__nv_bfloat16*>(grad_x_bf16), grad_x_token_stride, weight_grad_partials, rows, heads);
  });
}

}  // namespace topotrain::model::kernels
