// gradient_factor on a GPU: the norm on the device, the sums that must be finite on the
// device and on the host (a drafter's weights and counts are host values), nothing read back
// until the test reads the factor.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "topotrain/train/grad_clip.h"

using namespace topotrain;

TEST(GradClipGpu, FactorFromDeviceAndHostSums) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  const auto cuda = torch::dtype(torch::kFloat64).device(torch::kCUDA);
  const torch::Tensor norm_squared = torch::tensor(16.0, cuda);
  const torch::Tensor device_sum = torch::tensor({2.5}, cuda), host_counts = torch::tensor({3, 4}, torch::kInt64);
  const torch::Tensor host_weight = torch::tensor(5.0, torch::kFloat64);
  const torch::Tensor factor = gradient_factor(norm_squared, 2.0, 1.0, {device_sum, host_weight, host_counts});
  EXPECT_TRUE(factor.is_cuda());
  EXPECT_EQ(factor.item<double>(), 1.0 / (2.0 + 1e-6) / 2.0);
  const torch::Tensor nan_on_host = torch::tensor({1.0, std::nan("")}, torch::kFloat64);
  EXPECT_TRUE(std::isnan(gradient_factor(norm_squared, 2.0, 1.0, {device_sum, nan_on_host}).item<double>()));
  EXPECT_TRUE(std::isnan(gradient_factor(norm_squared, 2.0, 0.0, {device_sum * INFINITY}).item<double>()));
}
