#include "topotrain/train/adamw.h"

#include <cmath>
#include <map>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/torch_compat.h"

namespace topotrain {

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWConfig config) : config_(config) {
  for (auto& [name, param] : params) {
    if (param.scalar_type() != torch::kFloat32)
      throw std::invalid_argument(cat("AdamW: parameter ", name, " is ", param.scalar_type(),
                                      "; master weights must be fp32"));
    slots_.push_back(Slot{name, param, torch::zeros_like(param), torch::zeros_like(param), param.dim() >= 2});
  }
}

void AdamW::step(double lr, double grad_factor) {
  torch::NoGradGuard no_grad;
  ++steps_;
  if (compat::kCudaBuild && !slots_.empty() && slots_.front().param.is_cuda()) step_fused(lr, grad_factor);
  else step_loop(lr, grad_factor);
}

void AdamW::step_loop(double lr, double grad_factor) {
  if (grad_factor != 1.0) {
    std::vector<torch::Tensor> grads;
    for (auto& slot : slots_)
      if (slot.param.grad().defined()) grads.push_back(slot.param.grad());
    if (!grads.empty()) at::_foreach_mul_(grads, grad_factor);
  }
  const double bias1 = 1.0 - std::pow(config_.beta1, static_cast<double>(steps_));
  const double bias2 = 1.0 - std::pow(config_.beta2, static_cast<double>(steps_));
  for (auto& slot : slots_) {
    const torch::Tensor& grad = slot.param.grad();
    if (!grad.defined()) continue;
    if (slot.decay) slot.param.mul_(1.0 - lr * config_.weight_decay);
    slot.exp_avg.lerp_(grad, 1.0 - config_.beta1);
    slot.exp_avg_sq.mul_(config_.beta2).addcmul_(grad, grad, 1.0 - config_.beta2);
    torch::Tensor denom = (slot.exp_avg_sq.sqrt() / std::sqrt(bias2)).add_(config_.eps);
    slot.param.addcdiv_(slot.exp_avg, denom, -lr / bias1);
  }
}

void AdamW::step_fused(double lr, double grad_factor) {
  // The kernel divides each gradient by a device scalar, read there: no host synchronisation.
  const torch::Tensor grad_divisor =
      grad_factor == 1.0 ? torch::Tensor()
                         : torch::full({}, 1.0 / grad_factor, slots_.front().param.options());
  // Two launches: decayed matrices and undecayed vectors differ only in weight_decay.
  for (bool decay : {true, false}) {
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    for (auto& slot : slots_) {
      if (slot.decay != decay || !slot.param.grad().defined()) continue;
      params.push_back(slot.param);
      grads.push_back(slot.param.grad());
      exp_avgs.push_back(slot.exp_avg);
      exp_avg_sqs.push_back(slot.exp_avg_sq);
    }
    if (params.empty()) continue;
    compat::fused_adamw(params, grads, exp_avgs, exp_avg_sqs, steps_, lr, config_.beta1, config_.beta2,
                        decay ? config_.weight_decay : 0.0, config_.eps, grad_divisor);
  }
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
