#include "topotrain/train/grad_clip.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

using namespace topotrain;

namespace {

// The factor as the host computes it from the norm it reads (what the training session
// compares the device's decision with), in the same IEEE operations.
double host_factor(double norm_squared, double divisor, double max_norm) {
  const double norm = std::sqrt(norm_squared) / divisor;
  const double clip = max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
  return clip / divisor;
}

double factor_of(double norm_squared, double divisor, double max_norm, const std::vector<torch::Tensor>& sums = {}) {
  return gradient_factor(torch::tensor(norm_squared, torch::kFloat64), divisor, max_norm, sums).item<double>();
}

}  // namespace

TEST(GradClip, SquaredNormOfEveryDefinedGradient) {
  torch::manual_seed(0);
  torch::Tensor a = torch::randn({5, 3}).requires_grad_(), b = torch::randn({7}).requires_grad_();
  torch::Tensor none = torch::randn({2}).requires_grad_();
  a.mutable_grad() = torch::randn({5, 3});
  b.mutable_grad() = torch::randn({7});
  const double want = a.grad().to(torch::kFloat64).pow(2).sum().item<double>() +
                      b.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  const torch::Tensor got = squared_gradient_norm({{"a", a}, {"none", none}, {"b", b}});
  EXPECT_EQ(got.scalar_type(), torch::kFloat64);
  EXPECT_NEAR(got.item<double>(), want, 1e-5 * want);
  EXPECT_FALSE(squared_gradient_norm({{"none", none}}).defined());
}

// Bit for bit the host's factor: clipping off, within the norm, clipped, with a divisor.
TEST(GradClip, FactorIsTheHostsBitForBit) {
  for (double norm_squared : {0.0, 0.25, 1.0, 2.0, 1e6})
    for (double divisor : {1.0, 3.0, 1e-12})
      for (double max_norm : {0.0, 1.0, 0.5}) {
        SCOPED_TRACE(testing::Message() << norm_squared << " / " << divisor << " clip " << max_norm);
        EXPECT_EQ(factor_of(norm_squared, divisor, max_norm), host_factor(norm_squared, divisor, max_norm));
      }
  EXPECT_EQ(factor_of(4.0, 1.0, 1.0), 1.0 / (2.0 + 1e-6));
  EXPECT_EQ(factor_of(4.0, 2.0, 1.0), 0.5);
}

// NaN, so that AdamW skips, exactly where the host skips: a non-finite norm or a non-finite
// value among the sums; finite sums leave the factor as it was.
TEST(GradClip, FactorIsNanWhereTheStepMustBeSkipped) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (double max_norm : {0.0, 1.0}) {
    EXPECT_TRUE(std::isnan(factor_of(nan, 1.0, max_norm)));
    EXPECT_TRUE(std::isnan(factor_of(inf, 1.0, max_norm)));
    const torch::Tensor finite = torch::tensor({1.5, -2.0}, torch::kFloat64);
    const torch::Tensor counts = torch::tensor({3, 4}, torch::kInt64);
    EXPECT_EQ(factor_of(4.0, 2.0, max_norm, {finite, counts}), host_factor(4.0, 2.0, max_norm));
    EXPECT_TRUE(std::isnan(factor_of(4.0, 2.0, max_norm, {finite, torch::tensor({1.0, inf}, torch::kFloat64)})));
    EXPECT_TRUE(std::isnan(factor_of(4.0, 2.0, max_norm, {torch::tensor(nan, torch::kFloat32), counts})));
  }
}
