// DFlash attention on a GPU: the SDPA path (cuDNN's kernel for bucketed shapes) against the
// math path, outputs and gradients, in bf16.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dflash_sdpa_check.h"

TEST(DFlashGpu, SdpaPathMatchesTheMathPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  topotrain::model::test_support::expect_sdpa_matches_math(
      torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA), 2e-2);
}
