#include "topotrain/train/adamw.h"

#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/torch_compat.h"

#ifdef TOPOTRAIN_CUDA
#include <c10/cuda/CUDAStream.h>

#include "adamw_kernels.h"
#endif

namespace topotrain {

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWConfig config) : config_(config) {
  for (auto& [name, param] : params) {
    if (param.scalar_type() != torch::kFloat32)
      throw std::invalid_argument(cat("AdamW: parameter ", name, " is ", param.scalar_type(),
                                      "; master weights must be fp32"));
    slots_.push_back(Slot{name, param, torch::zeros_like(param), torch::zeros_like(param), param.dim() >= 2});
  }
}

bool AdamW::on_cuda() const { return compat::kCudaBuild && !slots_.empty() && slots_.front().param.is_cuda(); }

void AdamW::step(double lr, double grad_factor) {
  torch::NoGradGuard no_grad;
  ++steps_;
  if (on_cuda()) step_fused(lr, grad_factor, nullptr);
  else step_loop(lr, grad_factor);
}

void AdamW::step(double lr, const torch::Tensor& grad_factor) {
  const torch::Device device = slots_.empty() ? torch::Device(torch::kCPU) : slots_.front().param.device();
  if (grad_factor.numel() != 1 || grad_factor.scalar_type() != torch::kFloat64 || grad_factor.device() != device)
    throw std::logic_error(cat("AdamW: the gradient factor must be one fp64 value on ", device, "; got ",
                               grad_factor.scalar_type(), " ", grad_factor.sizes(), " on ", grad_factor.device()));
  torch::NoGradGuard no_grad;
  ++steps_;
  if (on_cuda()) {
    step_fused(lr, 1.0, grad_factor.data_ptr<double>());
  } else {
    const double factor = grad_factor.item<double>();  // on the host already: no wait
    if (std::isfinite(factor)) step_loop(lr, factor);
  }
}

void AdamW::unstep() {
  if (steps_ == 0) throw std::logic_error("AdamW::unstep: no step to take back");
  --steps_;
}

double AdamW::bias_correction(double beta) const { return 1.0 - std::pow(beta, static_cast<double>(steps_)); }

void AdamW::step_loop(double lr, double grad_factor) {
  const double bias1 = bias_correction(config_.beta1), bias2 = bias_correction(config_.beta2);
  for (auto& slot : slots_) {
    if (!slot.param.grad().defined()) continue;
    const torch::Tensor grad = grad_factor == 1.0 ? slot.param.grad() : slot.param.grad() * grad_factor;
    if (slot.decay) slot.param.mul_(1.0 - lr * config_.weight_decay);
    slot.exp_avg.lerp_(grad, 1.0 - config_.beta1);
    slot.exp_avg_sq.mul_(config_.beta2).addcmul_(grad, grad, 1.0 - config_.beta2);
    torch::Tensor denom = (slot.exp_avg_sq.sqrt() / std::sqrt(bias2)).add_(config_.eps);
    slot.param.addcdiv_(slot.exp_avg, denom, -lr / bias1);
  }
}

void AdamW::step_fused(double lr, double grad_factor, const double* device_grad_factor) {
#ifdef TOPOTRAIN_CUDA
  std::vector<kernels::AdamWTensor> table;
  std::vector<torch::Tensor> contiguous_grads;  // alive until the launch is enqueued
  std::int64_t chunks = 0;
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  for (auto& slot : slots_) {
    if (!slot.param.grad().defined()) continue;
    if (!slot.param.is_contiguous())
      throw std::logic_error(cat("AdamW: parameter ", slot.name, " is not contiguous; the fused step needs it"));
    const torch::Tensor& grad = slot.param.grad();
    const float* g = grad.is_contiguous() ? grad.data_ptr<float>()
                                          : contiguous_grads.emplace_back(grad.contiguous()).data_ptr<float>();
    kernels::AdamWTensor t{};
    t.param = slot.param.data_ptr<float>();
    t.grad = g;
    t.exp_avg = slot.exp_avg.data_ptr<float>();
    t.exp_avg_sq = slot.exp_avg_sq.data_ptr<float>();
    t.numel = slot.param.numel();
    t.first_chunk = chunks;
    t.decays = slot.decay ? 1 : 0;
    t.aligned = aligned(t.param) && aligned(t.grad) && aligned(t.exp_avg) && aligned(t.exp_avg_sq) ? 1 : 0;
    table.push_back(t);
    chunks += (t.numel + kernels::kAdamWChunk - 1) / kernels::kAdamWChunk;
  }
  if (table.empty()) return;
  const torch::Device device = slots_.front().param.device();
  const std::size_t bytes = table.size() * sizeof(kernels::AdamWTensor);
  // The table changes only when a gradient moves (the GradReducer keeps them in place): then
  // it goes up through pinned memory, asynchronously, ordered before the launch.
  if (!table_on_device_.defined() || table_on_device_.numel() != static_cast<std::int64_t>(bytes) ||
      table_on_device_.device() != device ||
      std::memcmp(table_on_host_.data_ptr(), table.data(), bytes) != 0) {
    table_on_host_ = torch::empty({static_cast<std::int64_t>(bytes)},
                                  torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
    std::memcpy(table_on_host_.data_ptr(), table.data(), bytes);
    table_on_device_ = table_on_host_.to(device, /*non_blocking=*/true);
  }
  const double bias1 = bias_correction(config_.beta1), bias2 = bias_correction(config_.beta2);
  kernels::AdamWScalars scalars{};
  scalars.beta1 = static_cast<float>(config_.beta1);
  scalars.beta2 = static_cast<float>(config_.beta2);
  scalars.eps = static_cast<float>(config_.eps);
  scalars.decay = static_cast<float>(lr * config_.weight_decay);
  scalars.step_size = static_cast<float>(lr / bias1);
  scalars.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias2));
  scalars.grad_factor = static_cast<float>(grad_factor);
  const cudaError_t status = kernels::adamw_step(
      static_cast<const kernels::AdamWTensor*>(table_on_device_.data_ptr()), static_cast<int>(table.size()), chunks,
      scalars, device_grad_factor, c10::cuda::getCurrentCUDAStream(device.index()).stream());
  if (status != cudaSuccess) throw std::runtime_error(cat("AdamW: CUDA step failed: ", cudaGetErrorString(status)));
  // The kernel writes the parameters behind autograd's back: a kept compute-dtype copy
  // (model::ComputeWeight) notices the update by their version counters.
  for (auto& slot : slots_)
    if (slot.param.grad().defined()) slot.param.unsafeGetTensorImpl()->bump_version();
#else
  (void)lr, (void)grad_factor, (void)device_grad_factor;
  throw std::logic_error("AdamW: the fused step needs a CUDA build");
#endif
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& slot : slots_) {
    out.emplace_back("exp_avg/" + slot.name, slot.exp_avg);
    out.emplace_back("exp_avg_sq/" + slot.name, slot.exp_avg_sq);
  }
  return out;
}

void AdamW::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state, std::int64_t steps) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  for (auto& slot : slots_) {
    for (auto* target : {&slot.exp_avg, &slot.exp_avg_sq}) {
      std::string key = (target == &slot.exp_avg ? "exp_avg/" : "exp_avg_sq/") + slot.name;
      auto it = by_name.find(key);
      if (it == by_name.end()) throw ConfigError(cat("checkpoint has no optimizer state '", key, "'"));
      if (!it->second.sizes().equals(target->sizes()))
        throw ConfigError(cat("optimizer state '", key, "' has shape ", it->second.sizes(), ", expected ",
                              target->sizes()));
      target->copy_(it->second);
    }
  }
  steps_ = steps;
}

}  // namespace topotrain
