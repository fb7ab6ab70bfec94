// AdamW's CUDA step (one launch of our kernel over every parameter) against its per-tensor
// loop of torch ops on the CPU from the same values: tensors whose sizes leave partial 16-byte
// vectors and partial chunks, gradients that are views at unaligned offsets of one buffer (as
// the GradReducer's buckets hold them), decayed and undecayed, with a gradient factor, over
// several steps; the factor also as a device value (a non-finite one skips the step). Also:
// a kept bf16 compute copy (model::ComputeWeight) follows the step.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>

#include "topotrain/model/compute_weight.h"
#include "topotrain/train/adamw.h"

using namespace topotrain;

namespace {

// Parameters of the given shapes on `device` from fixed values, and gradients as views of one
// flat buffer, packed back to back (so most start off a 16-byte boundary).
struct Model {
  std::vector<std::pair<std::string, torch::Tensor>> params;
  torch::Tensor grad_buffer;

  Model(const std::vector<std::vector<int64_t>>& shapes, const torch::Device& device) {
    torch::manual_seed(4);
    int64_t total = 0;
    for (const auto& shape : shapes) total += torch::empty(shape).numel();
    grad_buffer = torch::zeros({total}, torch::TensorOptions().device(device));
    int64_t offset = 0;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      auto p = torch::randn(shapes[i]).to(device).requires_grad_();
      p.mutable_grad() = grad_buffer.narrow(0, offset, p.numel()).view(shapes[i]);
      offset += p.numel();
      params.emplace_back("p" + std::to_string(i), p);
    }
  }

  void set_gradients(int step) {
    torch::NoGradGuard no_grad;
    auto values = torch::randn({grad_buffer.numel()}, torch::TensorOptions().dtype(torch::kFloat64)) * (step + 1);
    grad_buffer.copy_(values.to(torch::kFloat32));
  }
};

}  // namespace

TEST(AdamWGpu, OneLaunchMatchesTheLoopOfTorchOps) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  // Matrices decay, vectors do not. Packed back to back, the first two gradients start on a
  // 16-byte boundary (vector loads: three whole chunks, then one chunk and a partial one ending
  // inside a vector) and the rest off one (element by element): 7 and 1 are shorter than a
  // vector, 4095 ends inside one, an empty tensor sits between two others.
  const std::vector<std::vector<int64_t>> shapes{{3, 16384}, {16387}, {7}, {1, 1}, {64, 64}, {4095}, {0}, {5, 3}};
  Model gpu(shapes, torch::Device(torch::kCUDA)), cpu(shapes, torch::Device(torch::kCPU));
  AdamWConfig config{0.9, 0.95, 1e-8, 0.1};
  AdamW fused(gpu.params, config), loop(cpu.params, config);
  const double factor = 0.37;
  for (int step = 0; step < 4; ++step) {
    torch::manual_seed(100 + step);
    gpu.set_gradients(step);
    torch::manual_seed(100 + step);
    cpu.set_gradients(step);
    const auto grads_before = gpu.grad_buffer.clone();
    fused.step(1e-2, factor);
    loop.step(1e-2, factor);
    EXPECT_TRUE(torch::equal(gpu.grad_buffer, grads_before)) << "the step reads the gradients only";
  }
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE(gpu.params[i].first);
    const auto got = gpu.params[i].second.detach().cpu(), want = cpu.params[i].second.detach();
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-6)) << (got - want).abs().max();
  }
  for (const auto& [name, moment] : fused.state()) {
    SCOPED_TRACE(name);
    torch::Tensor want;
    for (const auto& [other, value] : loop.state())
      if (other == name) want = value;
    // Absolute slack of a few fp32 roundings of the largest gradient (~1.5): a first moment near
    // zero is a difference of similar terms, and the loop's lerp_ rounds in another order.
    EXPECT_TRUE(torch::allclose(moment.cpu(), want, 1e-5, 1e-6)) << (moment.cpu() - want).abs().max();
  }
  EXPECT_EQ(fused.steps(), 4);
}

// A factor on the device, read by the kernel, gives the very bits of the same factor passed
// by the host; a non-finite one leaves parameters and moments as they were, every chunk.
TEST(AdamWGpu, DeviceFactorActsAsTheHostsAndANonFiniteOneSkips) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  const std::vector<std::vector<int64_t>> shapes{{3, 16384}, {16387}, {7}, {64, 64}};
  const torch::Device cuda(torch::kCUDA);
  Model on_device(shapes, cuda), from_host(shapes, cuda);
  AdamW device_factor(on_device.params, {}), host_factor(from_host.params, {});
  const double factor = 0.37;
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(200 + step);
    on_device.set_gradients(step);
    torch::manual_seed(200 + step);
    from_host.set_gradients(step);
    std::vector<torch::Tensor> before;
    for (const auto& [name, p] : on_device.params) before.push_back(p.detach().clone());
    for (const auto& [name, m] : device_factor.state()) before.push_back(m.clone());
    device_factor.step(1e-2, torch::tensor(std::nan(""), torch::dtype(torch::kFloat64).device(cuda)));
    std::size_t i = 0;
    for (const auto& [name, p] : on_device.params) EXPECT_TRUE(torch::equal(p.detach(), before[i++])) << name;
    for (const auto& [name, m] : device_factor.state()) EXPECT_TRUE(torch::equal(m, before[i++])) << name;
    device_factor.unstep();
    device_factor.step(1e-2, torch::tensor(factor, torch::dtype(torch::kFloat64).device(cuda)));
    host_factor.step(1e-2, factor);
  }
  for (std::size_t i = 0; i < shapes.size(); ++i)
    EXPECT_TRUE(torch::equal(on_device.params[i].second, from_host.params[i].second)) << on_device.params[i].first;
  EXPECT_EQ(device_factor.steps(), 3);
}

// The step writes the parameters in place: it must bump their version counters, or a kept
// bf16 copy would outlive the update.
TEST(AdamWGpu, KeptComputeWeightFollowsTheStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  auto w = torch::randn({64, 32}, torch::TensorOptions().device(torch::kCUDA)).requires_grad_();
  w.mutable_grad() = torch::randn_like(w);
  model::ComputeWeight weight;
  const auto before = weight.values({w}, torch::kBFloat16).clone();
  AdamW optimizer({{"w", w}}, {});
  optimizer.step(0.1);
  const auto after = weight.values({w}, torch::kBFloat16);
  EXPECT_FALSE(torch::equal(after, before));
  EXPECT_TRUE(torch::equal(after, w.detach().to(torch::kBFloat16)));
}
