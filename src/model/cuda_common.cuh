// What our .cu files share: 16-byte bf16 vectors and their fp32 values, the warp-wide sum,
// launching a kernel template by a run-time value.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <type_traits>

namespace topotrain::model::kernels {

constexpr int kVector = 8;  // bf16 values per 16-byte load or store
constexpr unsigned kAllLanes = 0xffffffffu;

// One 16-byte load (uint4) seen as its eight bf16 values.
union Bf16x8 {
  uint4 raw;
  __nv_bfloat16 v[kVector];
};

// The eight bf16 values of one 16-byte load, each converted exactly to fp32.
__device__ inline void bf16x8_to_floats(uint4 raw, float (&out)[kVector]) {
  Bf16x8 v;
  v.raw = raw;
#pragma unroll
  for (int k = 0; k < kVector; ++k) out[k] = __bfloat162float(v.v[k]);
}

// Sum over the 32 lanes of a warp; every lane gets the total.
__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kAllLanes, v, offset);
  return v;
}

// For kernels templated on a per-thread register count chosen at run time: calls
// launch(std::integral_constant<int, V>{}) for the V of Values equal to `value` and returns the
// launch's error, or cudaErrorInvalidValue when no V matches.
template <int... Values, typename Launch>
cudaError_t launch_for(int value, Launch&& launch) {
  const bool matched = ((value == Values && (launch(std::integral_constant<int, Values>{}), true)) || ...);
  return matched ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace topotrain::model::kernels
