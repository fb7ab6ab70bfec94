// AdamW's fused CUDA step with a gradient factor (the fused kernel's gradient unscaling)
// against the same step on gradients multiplied first.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "topotrain/train/adamw.h"

using namespace topotrain;

TEST(AdamWGpu, AGradientFactorActsAsGradientsMultipliedFirst) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  torch::manual_seed(3);
  const auto options = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor w0 = torch::randn({64, 48}, options), b0 = torch::randn({48}, options);
  const double factor = 1.0 / 16384;  // a step's target count, as the trainers divide by
  torch::Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  torch::Tensor rw = w0.clone().requires_grad_(), rb = b0.clone().requires_grad_();
  AdamW ours({{"w", w}, {"b", b}}, {}), reference({{"w", rw}, {"b", rb}}, {});
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor gw = torch::randn_like(w0) * 1000, gb = torch::randn_like(b0) * 1000;
    w.mutable_grad() = gw.clone();
    b.mutable_grad() = gb.clone();
    rw.mutable_grad() = gw * factor;
    rb.mutable_grad() = gb * factor;
    ours.step(1e-2, factor);
    reference.step(1e-2);
    // One more rounding (dividing by the fp32 reciprocal of the factor): not bit-equal.
    EXPECT_TRUE(torch::allclose(w.grad(), rw.grad(), 1e-6, 0)) << (w.grad() - rw.grad()).abs().max();
    EXPECT_TRUE(torch::allclose(b.grad(), rb.grad(), 1e-6, 0));
  }
  EXPECT_TRUE(torch::allclose(w, rw, 1e-6, 1e-7)) << (w - rw).abs().max();
  EXPECT_TRUE(torch::allclose(b, rb, 1e-6, 1e-7)) << (b - rb).abs().max();
  EXPECT_FALSE(torch::allclose(w, w0)) << "the steps moved the weights";
}
