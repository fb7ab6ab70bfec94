#include "topotrain/train/grad_clip.h"

#include <torch/torch.h>

namespace topotrain {

double clip_gradients(const std::vector<std::pair<std::string, torch::Tensor>>& parameters, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> squares;
  for (const auto& [name, p] : parameters)
    if (p.grad().defined()) squares.push_back(p.grad().pow(2).sum());
  if (squares.empty()) return 0.0;
  const double norm = torch::stack(squares).sum().sqrt().item<double>();
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (const auto& [name, p] : parameters)
      if (p.grad().defined()) p.grad().mul_(scale);
  }
  return norm;
}

}  // namespace topotrain
