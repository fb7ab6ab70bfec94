#include "topotrain/train/build_info.h"

#include <torch/version.h>

#ifdef TOPOTRAIN_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

#include "topotrain/core/error.h"

#ifndef TOPOTRAIN_VERSION
#error "CMake defines TOPOTRAIN_VERSION: the project version"
#endif

namespace topotrain {

std::string build_info() {
#ifdef TOPOTRAIN_CUDA
  // CUDART_VERSION is major * 1000 + minor * 10.
  const std::string cuda = cat("CUDA ", CUDART_VERSION / 1000, '.', (CUDART_VERSION % 1000) / 10);
  const std::string nccl = cat("NCCL ", NCCL_MAJOR, '.', NCCL_MINOR, '.', NCCL_PATCH);
#else
  const std::string cuda = "no CUDA", nccl = "no NCCL";
#endif
  return cat("topotrain ", TOPOTRAIN_VERSION, "\nbuilt with LibTorch ", TORCH_VERSION, ", ", cuda, ", ", nccl, "\n");
}

}  // namespace topotrain
