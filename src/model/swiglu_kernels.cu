// SwiGLU forward and backward, 8 bf16 values (one 16-byte vector) per thread and step.
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace topotrain::model::kernels {
namespace {

constexpr int kThreads = 256;

__device__ inline float sigmoid(float a) { return 1.0f / (1.0f + __expf(-a)); }

// Rows are [gate | up], each `vectors` uint4 wide; a flat index i runs over rows * vectors.
__global__ void swiglu_forward_kernel(const uint4* gate_up, uint4* out, int64_t rows, int64_t vectors) {
  const int64_t n = rows * vectors;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / vectors, col = i - row * vectors;
    Bf16x8 gate, up, y;
    gate.raw = gate_up[row * 2 * vectors + col];
    up.raw = gate_up[row * 2 * vectors + vectors + col];
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      const float a = __bfloat162float(gate.v[k]);
      y.v[k] = __float2bfloat16(a * sigmoid(a) * __bfloat162float(up.v[k]));
    }
    out[i] = y.raw;
  }
}

// d/d gate = g * up * s * (1 + gate * (1 - s)), d/d up = g * silu(gate), s = sigmoid(gate).
__global__ void swiglu_backward_kernel(const uint4* gate_up, const uint4* grad_out, uint4* grad_gate_up, int64_t rows,
                                       int64_t vectors) {
  const int64_t n = rows * vectors;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / vectors, col = i - row * vectors;
    const int64_t gate_at = row * 2 * vectors + col, up_at = gate_at + vectors;
    Bf16x8 gate, up, g, d_gate, d_up;
    gate.raw = gate_up[gate_at];
    up.raw = gate_up[up_at];
    g.raw = grad_out[i];
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      const float a = __bfloat162float(gate.v[k]), b = __bfloat162float(up.v[k]), gk = __bfloat162float(g.v[k]);
      const float s = sigmoid(a);
      d_gate.v[k] = __float2bfloat16(gk * b * s * (1.0f + a * (1.0f - s)));
      d_up.v[k] = __float2bfloat16(gk * a * s);
    }
    grad_gate_up[gate_at] = d_gate.raw;
    grad_gate_up[up_at] = d_up.raw;
  }
}

unsigned grid_for(int64_t n) {
  // Enough blocks to fill any current GPU several times over; the loops stride beyond.
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 16384)));
}

}  // namespace

cudaError_t swiglu_forward(const void* gate_up_bf16, void* out_bf16, int64_t rows, int64_t inner,
                           cudaStream_t stream) {
  const int64_t vectors = inner / kVector;
  if (rows * vectors == 0) return cudaSuccess;
  swiglu_forward_kernel<<<grid_for(rows * vectors), kThreads, 0, stream>>>(
      static_cast<const uint4*>(gate_up_bf16), static_cast<uint4*>(out_bf16), rows, vectors);
  return cudaGetLastError();
}

cudaError_t swiglu_backward(const void* gate_up_bf16, const void* grad_out_bf16, void* grad_gate_up_bf16,
                            int64_t rows, int64_t inner, cudaStream_t stream) {
  const int64_t vectors = inner / kVector;
  if (rows * vectors == 0) return cudaSuccess;
  swiglu_backward_kernel<<<grid_for(rows * vectors), kThreads, 0, stream>>>(
      static_cast<const uint4*>(gate_up_bf16), static_cast<const uint4*>(grad_out_bf16),
      static_cast<uint4*>(grad_gate_up_bf16), rows, vectors);
  return cudaGetLastError();
}

}  // namespace topotrain::model::kernels
