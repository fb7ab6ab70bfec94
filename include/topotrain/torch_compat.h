// The one place where LibTorch versions and CUDA availability differ.
//
// The CPU machine and CI build against Debian's LibTorch 1.13 (CPU only); GPU machines
// build against pip torch 2.x with CUDA. Model and trainer code calls what is declared
// here instead of testing versions itself.
#pragma once

#include <torch/version.h>

#define TOPOTRAIN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||            \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace topotrain::compat {

// True when this build can run CUDA kernels (TOPOTRAIN_CUDA is defined by CMake exactly
// when the LibTorch found was built with CUDA).
constexpr bool kCudaBuild =
#ifdef TOPOTRAIN_CUDA
    true;
#else
    false;
#endif

}  // namespace topotrain::compat
