#include "topotrain/train/grad_clip.h"

#include <torch/torch.h>

namespace topotrain {
namespace {

std::vector<torch::Tensor> gradients(const std::vector<std::pair<std::string, torch::Tensor>>& parameters) {
  std::vector<torch::Tensor> out;
  for (const auto& [name, p] : parameters)
    if (p.grad().defined()) out.push_back(p.grad());
  return out;
}

}  // namespace

torch::Tensor squared_gradient_norm(const std::vector<std::pair<std::string, torch::Tensor>>& parameters) {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> grads = gradients(parameters);
  if (grads.empty()) return {};
  // fp64 for the sum of squares: a few hundred fp32 norms of up to ~1e9 elements each.
  return torch::stack(at::_foreach_norm(grads, 2)).to(torch::kFloat64).square().sum();
}

torch::Tensor gradient_factor(const torch::Tensor& norm_squared, double divisor, double max_norm,
                              const std::vector<torch::Tensor>& must_be_finite) {
  torch::NoGradGuard no_grad;
  const torch::Tensor norm = norm_squared.sqrt() / divisor;
  torch::Tensor factor = torch::ones_like(norm);
  // A division, not a reciprocal times max_norm: one rounding, as on the host.
  if (max_norm > 0) factor = torch::where(norm > max_norm, torch::full_like(norm, max_norm).div(norm + 1e-6), factor);
  // 0 * x is 0 for a finite x and NaN otherwise: the sum poisons the factor with any of them.
  torch::Tensor poison = norm * 0;
  for (const torch::Tensor& values : must_be_finite) poison = poison + (values.to(torch::kFloat64) * 0).sum();
  return factor / divisor + poison;
}

}  // namespace topotrain
