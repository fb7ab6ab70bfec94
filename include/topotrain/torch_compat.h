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

// ---------------------------------------------------------------------------------------
// Model kernels (src/model). Both are CUDA-only and differentiable in the versions named.
//
// TOPOTRAIN_HAS_FLASH_VARLEN: at::_flash_attention_forward takes packed [T, heads, dim]
//   tensors with cu_seqlens (FlashAttention-2 varlen, GQA without repeating k/v), accepts
//   `scale` and the window arguments from 2.5 on, and has an autograd formula.
// TOPOTRAIN_HAS_GROUPED_MM: at::_grouped_mm (2.8+) multiplies row groups of a 2-D matrix by
//   a stack of matrices in one launch (bf16, CUTLASS on sm90), with an autograd formula.
#if defined(TOPOTRAIN_CUDA) && TOPOTRAIN_TORCH_AT_LEAST(2, 5)
#define TOPOTRAIN_HAS_FLASH_VARLEN 1
#else
#define TOPOTRAIN_HAS_FLASH_VARLEN 0
#endif

#if defined(TOPOTRAIN_CUDA) && TOPOTRAIN_TORCH_AT_LEAST(2, 8)
#define TOPOTRAIN_HAS_GROUPED_MM 1
#else
#define TOPOTRAIN_HAS_GROUPED_MM 0
#endif

namespace topotrain::compat {
constexpr bool kHasFlashVarlen = TOPOTRAIN_HAS_FLASH_VARLEN;
constexpr bool kHasGroupedMm = TOPOTRAIN_HAS_GROUPED_MM;
}  // namespace topotrain::compat
