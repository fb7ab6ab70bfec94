// The MoE router after its GEMM: softmax over the experts, top-k, the optional renormalisation
// of the k weights and the per-expert selection counts in one kernel, and the backward of all
// three in another. One warp per token holds the token's probabilities in registers (lane l
// has experts l, l + 32, ...). Torch ops took ~10 launches per layer each way (softmax, topk,
// sum, div, the counts' zeros, ones and scatter_add; topk's and the division's backward), which
// cost a host-bound model more time than the few microseconds of device work they do.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace topotrain::model::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kNoExpert = INT_MAX;

// The order of torch.topk over probabilities: larger first, NaN above everything, and ties (which
// torch leaves unspecified) to the lower expert, so that every lane of a warp agrees on a winner.
__device__ inline bool ranks_before(float a, int expert_a, float b, int expert_b) {
  if (expert_b == kNoExpert) return expert_a != kNoExpert;
  if (expert_a == kNoExpert) return false;
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan || b_nan) return a_nan && (!b_nan || expert_a < expert_b);
  return a > b || (a == b && expert_a < expert_b);
}

__device__ inline float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kAllLanes, v, offset));
  return v;
}

// kSlots = experts per lane, ceil(experts / 32) rounded up to a power of two.
template <int kSlots>
__global__ void route_forward_kernel(const float* logits, float* probs, float* weights, uint8_t* selected,
                                     int* counts, int64_t tokens, int experts, int k, bool renormalize) {
  // Counts per block first, then one global atomic per expert and block: integer sums, so the
  // order of the atomics does not change the result.
  __shared__ int block_counts[kMaxRouterExperts];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) block_counts[e] = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * kWarps) {
    const float* row = logits + t * experts;
    float p[kSlots];
    float max = -INFINITY;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int e = s * 32 + lane;
      p[s] = e < experts ? row[e] : -INFINITY;
      max = fmaxf(max, p[s]);
    }
    max = warp_max(max);
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      p[s] = s * 32 + lane < experts ? expf(p[s] - max) : 0.0f;
      sum += p[s];
    }
    sum = warp_sum(sum);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int e = s * 32 + lane;
      if (e < experts) {
        p[s] /= sum;
        probs[t * experts + e] = p[s];
      }
    }
    // k rounds of a warp-wide argmax over the experts not yet taken; lane j keeps choice j.
    unsigned taken = 0;  // bit s: this lane's slot s is chosen
    float choice_p = 0.0f;
    int choice_e = 0;
    for (int j = 0; j < k; ++j) {
      float best = 0.0f;
      int best_e = kNoExpert;
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int e = s * 32 + lane;
        if (e < experts && !((taken >> s) & 1u) && ranks_before(p[s], e, best, best_e)) best = p[s], best_e = e;
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(kAllLanes, best, offset);
        const int other_e = __shfl_xor_sync(kAllLanes, best_e, offset);
        if (ranks_before(other, other_e, best, best_e)) best = other, best_e = other_e;
      }
      if (best_e % 32 == lane) taken |= 1u << (best_e / 32);
      if (lane == j) choice_p = best, choice_e = best_e;
    }
    const float total = warp_sum(lane < k ? choice_p : 0.0f);
    if (lane < k) {
      weights[t * k + lane] = renormalize ? choice_p / total : choice_p;
      selected[t * k + lane] = static_cast<uint8_t>(choice_e);
      atomicAdd(&block_counts[choice_e], 1);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    if (block_counts[e] != 0) atomicAdd(&counts[e], block_counts[e]);
  }
}

// grad_logits = p * (g - <p, g>) for g = grad_probs + the gradient that reaches each chosen
// expert's probability through its weight: g_j when not renormalised, else
// (g_j - sum_i g_i w_i) / S for w_j = p_j / S, S the sum of the k chosen probabilities.
template <int kSlots>
__global__ void route_backward_kernel(const float* probs, const uint8_t* selected, const float* weights,
                                      const float* grad_weights, const float* grad_probs, float* grad_logits,
                                      int64_t tokens, int experts, int k, bool renormalize) {
  const int lane = threadIdx.x & 31;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * kWarps) {
    const float* p_row = probs + t * experts;
    float p[kSlots], g[kSlots];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int e = s * 32 + lane;
      p[s] = e < experts ? p_row[e] : 0.0f;
      g[s] = e < experts && grad_probs != nullptr ? grad_probs[t * experts + e] : 0.0f;
    }
    int choice_e = 0;
    float d = 0.0f;  // lane j < k: the gradient of choice j's probability through its weight
    if (lane < k) {
      choice_e = selected[t * k + lane];
      d = grad_weights != nullptr ? grad_weights[t * k + lane] : 0.0f;
    }
    if (renormalize) {
      const float chosen_sum = warp_sum(lane < k ? p_row[choice_e] : 0.0f);
      const float weighted = warp_sum(lane < k ? d * weights[t * k + lane] : 0.0f);
      d = (d - weighted) / chosen_sum;
    }
    for (int j = 0; j < k; ++j) {
      const int e = __shfl_sync(kAllLanes, choice_e, j);
      const float dj = __shfl_sync(kAllLanes, d, j);
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        if (s * 32 + lane == e) g[s] += dj;
      }
    }
    float dot = 0.0f;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) dot += p[s] * g[s];
    dot = warp_sum(dot);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int e = s * 32 + lane;
      if (e < experts) grad_logits[t * experts + e] = p[s] * (g[s] - dot);
    }
  }
}

unsigned blocks_for(int64_t tokens) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((tokens + kWarps - 1) / kWarps, 4096)));
}

int slots_for(int64_t experts) {
  int slots = 1;
  while (slots * 32 < experts) slots *= 2;
  return slots;
}

bool valid_shape(int64_t experts, int64_t k) {
  return experts >= 1 && experts <= kMaxRouterExperts && k >= 1 && k <= kMaxRouterChoices && k <= experts;
}

}  // namespace

cudaError_t route_forward(const float* logits, float* probs, float* weights, uint8_t* selected, int* counts,
                          int64_t tokens, int64_t experts, int64_t k, bool renormalize, cudaStream_t stream) {
  if (!valid_shape(experts, k)) return cudaErrorInvalidValue;
  const cudaError_t zeroed = cudaMemsetAsync(counts, 0, sizeof(int) * static_cast<size_t>(experts), stream);
  if (zeroed != cudaSuccess || tokens == 0) return zeroed;
  return launch_for<1, 2, 4, 8>(slots_for(experts), [&](auto slots) {
    route_forward_kernel<decltype(slots)::value><<<blocks_for(tokens), kWarps * 32, 0, stream>>>(
        logits, probs, weights, selected, counts, tokens, static_cast<int>(experts), static_cast<int>(k),
        renormalize);
  });
}

cudaError_t route_backward(const float* probs, const uint8_t* selected, const float* weights,
                           const float* grad_weights, const float* grad_probs, float* grad_logits, int64_t tokens,
                           int64_t experts, int64_t k, bool renormalize, cudaStream_t stream) {
  if (!valid_shape(experts, k)) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  return launch_for<1, 2, 4, 8>(slots_for(experts), [&](auto slots) {
    route_backward_kernel<decltype(slots)::value><<<blocks_for(tokens), kWarps * 32, 0, stream>>>(
        probs, selected, weights, grad_weights, grad_probs, grad_logits, tokens, static_cast<int>(experts),
        static_cast<int>(k), renormalize);
  });
}

}  // namespace topotrain::model::kernels
