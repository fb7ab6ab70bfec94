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

double clip_factor(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

}  // namespace topotrain
