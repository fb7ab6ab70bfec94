// Row-wise cross-entropy from bf16 logits, its gradient written over the logits.
//
// One block per row, two passes over the row's vocab values: an online max/sum-of-exp (and
// argmax) pass, then the softmax minus the one-hot target. That reads the bf16 row twice and
// writes it once, where log_softmax to fp32, exp, scatter and a cast back to bf16 made about
// four times the traffic.
#include <cuda_bf16.h>

#include <cfloat>
#include <cmath>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace topotrain::model::kernels {
namespace {

constexpr int kThreads = 512;

// Running max m and sum of exp(value - m); a part with no values has m = -inf, sum = 0.
struct MaxSum {
  float max, sum;
};

__device__ inline MaxSum combine(MaxSum a, MaxSum b) {
  if (a.max == -INFINITY) return b;
  if (b.max == -INFINITY) return a;
  const float m = fmaxf(a.max, b.max);
  return {m, a.sum * __expf(a.max - m) + b.sum * __expf(b.max - m)};
}

// Larger value wins; on a tie the smaller index (torch.argmax returns the first maximum).
struct Best {
  float value;
  int64_t index;
};

__device__ inline Best better(Best a, Best b) {
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

__global__ void cross_entropy_rows_kernel(__nv_bfloat16* logits, const int64_t* targets, const float* row_weights,
                                          float* row_loss, int64_t* argmax, bool write_grad, int64_t vocab) {
  __shared__ MaxSum part_sums[kThreads / 32];
  __shared__ Best part_best[kThreads / 32];
  __shared__ float shared_lse;
  const int64_t row = blockIdx.x;
  uint4* values = reinterpret_cast<uint4*>(logits + row * vocab);
  const int64_t vectors = vocab / kVector;

  MaxSum mine{-INFINITY, 0.0f};
  Best best{-INFINITY, vocab};
  for (int64_t i = threadIdx.x; i < vectors; i += kThreads) {
    Bf16x8 chunk;
    chunk.raw = values[i];
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      const float v = __bfloat162float(chunk.v[k]);
      if (v > mine.max) {
        mine.sum = mine.sum * __expf(mine.max - v) + 1.0f;
        mine.max = v;
      } else {
        mine.sum += __expf(v - mine.max);
      }
      best = better(best, {v, i * kVector + k});
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    mine = combine(mine, {__shfl_xor_sync(kAllLanes, mine.max, offset), __shfl_xor_sync(kAllLanes, mine.sum, offset)});
    best = better(best, {__shfl_xor_sync(kAllLanes, best.value, offset),
                         __shfl_xor_sync(kAllLanes, best.index, offset)});
  }
  if (lane == 0) {
    part_sums[warp] = mine;
    part_best[warp] = best;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum total = part_sums[0];
    Best top = part_best[0];
    for (int w = 1; w < kThreads / 32; ++w) {
      total = combine(total, part_sums[w]);
      top = better(top, part_best[w]);
    }
    const float lse = total.max + logf(total.sum);
    const int64_t target = targets[row];
    row_loss[row] = (target >= 0 && target < vocab) ? lse - __bfloat162float(logits[row * vocab + target]) : NAN;
    if (argmax != nullptr) argmax[row] = top.index;
    shared_lse = lse;
  }
  __syncthreads();
  if (!write_grad) return;
  const float lse = shared_lse;
  const float scale = row_weights != nullptr ? row_weights[row] : 1.0f;
  const int64_t target = targets[row];
  for (int64_t i = threadIdx.x; i < vectors; i += kThreads) {
    Bf16x8 chunk;
    chunk.raw = values[i];
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      const float p = __expf(__bfloat162float(chunk.v[k]) - lse);
      chunk.v[k] = __float2bfloat16((p - (i * kVector + k == target ? 1.0f : 0.0f)) * scale);
    }
    values[i] = chunk.raw;
  }
}

}  // namespace

cudaError_t cross_entropy_rows(void* logits_bf16, const int64_t* targets, const float* row_weights, float* row_loss,
                               int64_t* argmax, bool write_grad, int64_t rows, int64_t vocab, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (vocab % kVector != 0) return cudaErrorInvalidValue;
  cross_entropy_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<__nv_bfloat16*>(logits_bf16), targets, row_weights, row_loss, argmax, write_grad, vocab);
  return cudaGetLastError();
}

}  // namespace topotrain::model::kernels
