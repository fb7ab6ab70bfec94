// The torch side of topotrain's CUDA kernels (cuda_kernels.h): where they apply and how a
// caller launches them. Every fused op keeps a torch-op path for the other cases (CPU, fp32
// on a GPU, shapes the kernels do not take), which is also the reference in the GPU tests.
#pragma once

#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "topotrain/torch_compat.h"

#ifdef TOPOTRAIN_CUDA
#include <c10/cuda/CUDAStream.h>

#include "cuda_kernels.h"
#endif

namespace topotrain::model {

// Our kernels read and write bf16 tensors on a CUDA device.
inline bool own_kernels_apply(const torch::Device& device, torch::ScalarType dtype) {
  return compat::kCudaBuild && device.is_cuda() && dtype == torch::kBFloat16;
}
inline bool own_kernels_apply(const torch::Tensor& t) { return own_kernels_apply(t.device(), t.scalar_type()); }

#ifdef TOPOTRAIN_CUDA
inline cudaStream_t stream_of(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

inline void check_launch(cudaError_t status, const char* kernel) {
  if (status == cudaSuccess) return;
  std::string message = std::string("CUDA kernel ") + kernel + " failed to launch: " + cudaGetErrorString(status);
  int device = 0, major = 0, minor = 0;
  if (status == cudaErrorNoKernelImageForDevice && cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess) {
    const std::string arch = std::to_string(major * 10 + minor);
    message += "; topotrain's kernels were not compiled for this GPU (sm_" + arch +
               "): rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + arch +
               " (launch/build.sh passes it to CMake), or set model.dtype = fp32 to use torch ops only";
  }
  throw std::runtime_error(message);
}
#endif

}  // namespace topotrain::model
