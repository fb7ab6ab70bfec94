// The MoE router's GEMM, fp32 arithmetic over the bf16 activations as they are. Through torch
// the router cast x to an fp32 copy (twice x's bytes, written and read again), ran an fp32
// GEMM with a handful of output columns (too narrow for the GEMM library's tiles), and in the
// backward made an fp32 input gradient and cast it back: twelve passes over [T, H] per layer,
// counted in bf16 bytes, for a product of ~E * H * T FMAs. Here three: the forward reads x, the
// backward reads it once more and writes its gradient.
//
// Forward: a block holds a tile of kTile experts' weight rows in shared memory; each warp takes
// kTokens tokens, its lanes 8 columns at a time, and sums each (token, expert) across the warp.
// Backward, input: a block holds every expert's weights for a 256-column slice; each warp
// walks tokens, a lane owning 8 columns of the gradient. Backward, weight: each thread owns
// 8 experts x 8 columns of one block's partial sum over its token chunks; the caller sums the
// blocks' partials in a fixed order, so the weight gradient is deterministic.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace topotrain::model::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kSliceColumns = 32 * kVector;  // one warp's columns in the input gradient
constexpr int kChunkTokens = 64;             // tokens a weight-gradient block stages at once
constexpr int kExpertsPerThread = 8;         // the weight gradient's register tile: 8 experts x 8 columns
constexpr int kMaxWeightGradBlocks = 128;
constexpr int kForwardTokens = 4;    // tokens a warp of the forward sums at once
constexpr int kMaxForwardBlocks = 1024;
constexpr size_t kMaxSharedBytes = 96 * 1024;  // two blocks per multiprocessor

__device__ inline void load_floats(const float* src, float (&dst)[kVector]) {
  const float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
  dst[0] = a.x, dst[1] = a.y, dst[2] = a.z, dst[3] = a.w, dst[4] = b.x, dst[5] = b.y, dst[6] = b.z, dst[7] = b.w;
}

// logits [tokens, experts] for experts [blockIdx.y * kTile, +kTile).
template <int kTile, int kTokens>
__global__ void __launch_bounds__(kThreads, 2) router_logits_kernel(const uint4* x, const float* weight, float* logits,
                                                                 int64_t tokens, int experts, int hidden) {
  extern __shared__ float4 shared[];
  float* w = reinterpret_cast<float*>(shared);  // [kTile][hidden], rows past the last expert zero
  const int first = blockIdx.y * kTile;
  const int tile = min(kTile, experts - first);
  const int quads = hidden / 4;
  for (int i = threadIdx.x; i < kTile * quads; i += kThreads) {
    shared[i] = i / quads < tile ? reinterpret_cast<const float4*>(weight + static_cast<int64_t>(first) * hidden)[i]
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int vectors = hidden / kVector;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps * kTokens;
  for (int64_t t0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kTokens; t0 < tokens;
       t0 += step) {
    float acc[kTokens][kTile] = {};
    for (int v = lane; v < vectors; v += 32) {
      float xv[kTokens][kVector];
#pragma unroll
      for (int t = 0; t < kTokens; ++t) {
        bf16x8_to_floats(t0 + t < tokens ? x[(t0 + t) * vectors + v] : make_uint4(0, 0, 0, 0), xv[t]);
      }
#pragma unroll
      for (int e = 0; e < kTile; ++e) {
        float wv[kVector];
        load_floats(w + e * hidden + v * kVector, wv);
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
#pragma unroll
          for (int j = 0; j < kVector; ++j) acc[t][e] = fmaf(xv[t][j], wv[j], acc[t][e]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
#pragma unroll
      for (int e = 0; e < kTile; ++e) {
        const float sum = warp_sum(acc[t][e]);
        if (lane == (t * kTile + e) % 32 && t0 + t < tokens && e < tile) logits[(t0 + t) * experts + first + e] = sum;
      }
    }
  }
}

// grad_x [tokens, hidden] for the columns [blockIdx.y * kSliceColumns, +kSliceColumns).
template <int kTokens>
__global__ void __launch_bounds__(kThreads) router_input_grad_kernel(const float* grad_logits, const float* weight,
                                                                     uint4* grad_x, int64_t tokens, int experts,
                                                                     int hidden) {
  extern __shared__ float4 shared[];
  float* w = reinterpret_cast<float*>(shared);  // [experts][kSliceColumns], columns past hidden zero
  const int column0 = blockIdx.y * kSliceColumns;
  for (int i = threadIdx.x; i < experts * kSliceColumns / 4; i += kThreads) {
    const int e = i / (kSliceColumns / 4), c = column0 + (i % (kSliceColumns / 4)) * 4;
    shared[i] = c < hidden ? *reinterpret_cast<const float4*>(weight + static_cast<int64_t>(e) * hidden + c)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int column = column0 + lane * kVector;
  const int vectors = hidden / kVector;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps * kTokens;
  for (int64_t t0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kTokens; t0 < tokens;
       t0 += step) {
    float acc[kTokens][kVector] = {};
    for (int e = 0; e < experts; ++e) {
      float wv[kVector];
      load_floats(w + e * kSliceColumns + lane * kVector, wv);
#pragma unroll
      for (int t = 0; t < kTokens; ++t) {
        // Every lane reads the same value: one broadcast load.
        const float g = t0 + t < tokens ? grad_logits[(t0 + t) * experts + e] : 0.0f;
#pragma unroll
        for (int j = 0; j < kVector; ++j) acc[t][j] = fmaf(g, wv[j], acc[t][j]);
      }
    }
    if (column >= hidden) continue;
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t0 + t >= tokens) break;
      Bf16x8 out;
#pragma unroll
      for (int j = 0; j < kVector; ++j) out.v[j] = __float2bfloat16(acc[t][j]);
      grad_x[(t0 + t) * vectors + column / kVector] = out.raw;
    }
  }
}

// partials[blockIdx.x] [experts, hidden] = the sum over this block's token chunks of
// grad_logits[t]^T x[t]; blockIdx.y picks which kThreads (expert group, column vector) pairs.
__global__ void __launch_bounds__(kThreads) router_weight_grad_kernel(const uint4* x, const float* grad_logits,
                                                                      float* partials, int64_t tokens, int experts,
                                                                      int hidden) {
  __shared__ float g[kChunkTokens * kMaxRouterGemmExperts];
  const int vectors = hidden / kVector;
  const int item = blockIdx.y * kThreads + threadIdx.x;
  const int v = item % vectors, e0 = item / vectors * kExpertsPerThread;
  const bool owns = e0 < experts;
  float acc[kExpertsPerThread][kVector] = {};
  for (int64_t c0 = static_cast<int64_t>(blockIdx.x) * kChunkTokens; c0 < tokens;
       c0 += static_cast<int64_t>(gridDim.x) * kChunkTokens) {
    const int chunk = tokens - c0 < kChunkTokens ? static_cast<int>(tokens - c0) : kChunkTokens;
    __syncthreads();  // the previous chunk's reads are done
    for (int i = threadIdx.x; i < chunk * experts; i += kThreads) g[i] = grad_logits[c0 * experts + i];
    __syncthreads();
    if (!owns) continue;
#pragma unroll 4
    for (int t = 0; t < chunk; ++t) {
      float xv[kVector];
      bf16x8_to_floats(x[(c0 + t) * vectors + v], xv);
#pragma unroll
      for (int i = 0; i < kExpertsPerThread; ++i) {
        const float ge = e0 + i < experts ? g[t * experts + e0 + i] : 0.0f;
#pragma unroll
        for (int j = 0; j < kVector; ++j) acc[i][j] = fmaf(ge, xv[j], acc[i][j]);
      }
    }
  }
  if (!owns) return;
  float* out = partials + static_cast<int64_t>(blockIdx.x) * experts * hidden;
#pragma unroll
  for (int i = 0; i < kExpertsPerThread; ++i) {
    if (e0 + i >= experts) break;
    float4* row = reinterpret_cast<float4*>(out + static_cast<int64_t>(e0 + i) * hidden + v * kVector);
    row[0] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    row[1] = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
  }
}

// The forward's expert tile: 16 where its weights fit the shared-memory budget and more than 8
// experts need it, else 8.
int forward_tile(int64_t experts, int64_t hidden) {
  return experts > 8 && 16 * hidden * sizeof(float) <= kMaxSharedBytes ? 16 : 8;
}

template <typename Kernel>
cudaError_t allow_shared(Kernel kernel, size_t bytes) {
  return bytes > 48 * 1024 ? cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(bytes))
                           : cudaSuccess;
}

int blocks_for(int64_t tokens, int64_t tokens_per_block, int64_t cap) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((tokens + tokens_per_block - 1) / tokens_per_block,
                                                                 cap)));
}

}  // namespace

bool router_gemm_applies(int64_t experts, int64_t hidden) {
  return experts >= 1 && experts <= kMaxRouterGemmExperts && hidden >= kVector && hidden % kVector == 0 &&
         hidden <= kMaxRouterGemmHidden;
}

cudaError_t router_logits_forward(const void* x_bf16, const float* weight, float* logits, int64_t tokens,
                                  int64_t experts, int64_t hidden, cudaStream_t stream) {
  if (!router_gemm_applies(experts, hidden)) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  const int tile = forward_tile(experts, hidden);
  const size_t shared = tile * hidden * sizeof(float);
  const dim3 grid(blocks_for(tokens, kWarps * kForwardTokens, kMaxForwardBlocks),
                  static_cast<unsigned>((experts + tile - 1) / tile));
  // Four tokens a warp: a thread's 32 or 64 sums and 32 x values stay in registers with two
  // blocks on a multiprocessor.
  auto launch = [&](auto kernel) {
    const cudaError_t status = allow_shared(kernel, shared);
    if (status != cudaSuccess) return status;
    kernel<<<grid, kThreads, shared, stream>>>(static_cast<const uint4*>(x_bf16), weight, logits, tokens,
                                               static_cast<int>(experts), static_cast<int>(hidden));
    return cudaGetLastError();
  };
  return tile == 16 ? launch(router_logits_kernel<16, kForwardTokens>)
                    : launch(router_logits_kernel<8, kForwardTokens>);
}

cudaError_t router_logits_backward_input(const float* grad_logits, const float* weight, void* grad_x_bf16,
                                         int64_t tokens, int64_t experts, int64_t hidden, cudaStream_t stream) {
  if (!router_gemm_applies(experts, hidden)) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  constexpr int kTokens = 4;
  const size_t shared = experts * kSliceColumns * sizeof(float);
  const cudaError_t status = allow_shared(router_input_grad_kernel<kTokens>, shared);
  if (status != cudaSuccess) return status;
  const dim3 grid(blocks_for(tokens, kWarps * kTokens * 4, kMaxForwardBlocks),
                  static_cast<unsigned>((hidden + kSliceColumns - 1) / kSliceColumns));
  router_input_grad_kernel<kTokens><<<grid, kThreads, shared, stream>>>(
      grad_logits, weight, static_cast<uint4*>(grad_x_bf16), tokens, static_cast<int>(experts),
      static_cast<int>(hidden));
  return cudaGetLastError();
}

int64_t router_weight_grad_blocks(int64_t tokens) { return blocks_for(tokens, kChunkTokens, kMaxWeightGradBlocks); }

cudaError_t router_logits_backward_weight(const void* x_bf16, const float* grad_logits, float* partials,
                                          int64_t tokens, int64_t experts, int64_t hidden, cudaStream_t stream) {
  if (!router_gemm_applies(experts, hidden)) return cudaErrorInvalidValue;
  const int64_t items = (hidden / kVector) * ((experts + kExpertsPerThread - 1) / kExpertsPerThread);
  const dim3 grid(static_cast<unsigned>(router_weight_grad_blocks(tokens)),
                  static_cast<unsigned>((items + kThreads - 1) / kThreads));
  // With no tokens the blocks write zero partials.
  router_weight_grad_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const uint4*>(x_bf16), grad_logits, partials,
                                                          tokens, static_cast<int>(experts),
                                                          static_cast<int>(hidden));
  return cudaGetLastError();
}

}  // namespace topotrain::model::kernels
