// Shared by the CPU and GPU tests of model::AccumulateIntoGrad: two copies of one model train
// the same two micro-batches with every parameter's .grad() defined and zero first (as the
// GradReducer keeps them), one with autograd's accumulation and one inside the scope.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/torch.h>

#include "topotrain/batch/packed_batch.h"
#include "topotrain/model/accumulate_into_grad.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/lm_loss.h"

namespace topotrain::model::test_support {

// What a GradReducer's ready hook sees: calls of a parameter's AccumulateGrad node, and how
// many of them came with a gradient (autograd's path) rather than none (added by the op).
struct AccumulatorCalls {
  int calls = 0, with_gradient = 0;
};

class CountingHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit CountingHook(AccumulatorCalls* calls) : calls_(calls) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& inputs) override {
    ++calls_->calls;
    if (!inputs.empty() && inputs[0].defined()) ++calls_->with_gradient;
    return outputs;
  }

 private:
  AccumulatorCalls* calls_;
};

struct IntoGradRun {
  std::vector<torch::Tensor> grads;       // per parameter, in parameters() order
  std::vector<AccumulatorCalls> hooked;   // per parameter
};

// Two micro-batches' forward and backward of `model` (compute dtype bf16) on `device`; `into`
// opens an AccumulateIntoGrad scope around each.
inline IntoGradRun train_two_micro_batches(CausalLMImpl& model, const torch::Device& device, bool into) {
  model.to(device);
  model.set_compute_dtype(torch::kBFloat16);
  auto params = model.parameters();
  IntoGradRun run;
  run.hooked.resize(params.size());
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks;
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = torch::zeros_like(params[i]);
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    hooks.emplace_back(accumulator, accumulator->add_post_hook(std::make_unique<CountingHook>(&run.hooked[i])));
  }
  const std::vector<std::vector<std::vector<int64_t>>> micro_batches = {{{1, 5, 9, 2, 7, 4}, {3, 3, 8}},
                                                                        {{6, 2, 2, 9}, {4, 1, 7, 7, 5}}};
  for (const auto& documents : micro_batches) {
    const PackedBatch batch = PackedBatch::from_documents(documents).to(device, /*non_blocking=*/false);
    std::unique_ptr<AccumulateIntoGrad> scope;
    if (into) scope = std::make_unique<AccumulateIntoGrad>();
    auto out = model.forward_backbone(batch);
    auto lm = lm_loss(model, out.hidden, batch);
    (lm.loss_sum / 7.0 + out.aux_loss * 0.01).backward();
  }
  for (auto& [accumulator, key] : hooks) accumulator->del_post_hook(key);
  for (const auto& p : params) run.grads.push_back(p.grad().cpu());
  return run;
}

// The gradients of the scope's run equal autograd's on `device`, and every AccumulateGrad node
// runs once per micro-batch in both; inside the scope the bf16-cast masters' nodes get no
// gradient (the op added it).
inline void expect_into_grad_matches_autograd(const char* preset, const torch::Device& device) {
  SCOPED_TRACE(preset);
  const auto config = ModelConfig::preset(preset);
  CausalLM reference(config), into(config);
  {
    torch::NoGradGuard no_grad;
    auto to = into->parameters();
    auto from = reference->parameters();
    for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
  }
  const auto expected = train_two_micro_batches(*reference, device, /*into=*/false);
  const auto got = train_two_micro_batches(*into, device, /*into=*/true);
  const auto named = into->named_parameters();
  int added_by_op = 0;
  for (size_t i = 0; i < named.size(); ++i) {
    const std::string& param = named[i].key();
    SCOPED_TRACE(param);
    // The LM head's gradient is scaled and added in one rounding (addcmul) where autograd
    // rounds twice (mul, then add): equal to float rounding of the largest entry.
    const double error = (got.grads[i] - expected.grads[i]).abs().max().item<double>();
    EXPECT_LE(error, 1e-6 * expected.grads[i].abs().max().item<double>());
    EXPECT_EQ(expected.hooked[i].calls, 2);
    EXPECT_EQ(expected.hooked[i].with_gradient, 2);
    EXPECT_EQ(got.hooked[i].calls, 2);
    // Norm weights and the fp32 router reach autograd as they are; the projections, experts,
    // LM head and embedding table (tied or not) are added into .grad() by their ops.
    const bool cast_master = named[i].value().dim() >= 2 && param.find("gate.weight") == std::string::npos;
    EXPECT_EQ(got.hooked[i].with_gradient, cast_master ? 0 : 2);
    added_by_op += cast_master;
  }
  EXPECT_GT(added_by_op, 0);
}

}  // namespace topotrain::model::test_support
