// Shared by the CPU and GPU tests of model::ExpertLayout: two copies of one sparse block, one in
// expert order and one busiest first, train the same micro-batches (bf16 compute copies, every
// .grad() defined and added into, as in a trainer) over two optimizer steps of two micro-batches
// each. Outputs, input gradients and the gradients added into .grad() must be equal bit for bit.
// The first step keeps expert order (no loads yet); the second takes the busiest-first order of
// the first step's last micro-batch and keeps it for both of its micro-batches (their copies are
// cast once).
#pragma once

#include <cmath>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "topotrain/model/accumulate_into_grad.h"
#include "topotrain/model/config.h"
#include "topotrain/model/moe.h"

namespace topotrain::model::test_support {

inline void expect_busiest_first_equals_expert_order(const torch::Device& device, ExpertBackend backend) {
  auto config = ModelConfig::preset("tiny-moe");
  config.hidden_size = 128, config.moe_intermediate_size = 64;  // the grouped GEMM's 16-byte rows
  SparseMoeBlock ordered(config), busiest(config);
  ordered->set_layout(ExpertLayout::expert_order);
  busiest->set_layout(ExpertLayout::busiest_first);
  // A direction every token shares, as a residual stream's common part, and two experts whose
  // router rows point along it: uneven loads.
  const auto shared = torch::ones({config.hidden_size}) / std::sqrt(static_cast<double>(config.hidden_size));
  {
    torch::NoGradGuard no_grad;
    ordered->gate->weight.narrow(0, 1, 2).add_(shared);
    const auto from = ordered->parameters();
    const auto to = busiest->parameters();
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  ordered->to(device);
  busiest->to(device);
  for (auto* block : {&ordered, &busiest})
    for (auto& p : (*block)->parameters()) p.mutable_grad() = torch::zeros_like(p);
  const auto identity = torch::arange(config.num_experts, torch::TensorOptions().dtype(torch::kInt64).device(device));
  torch::Tensor want_groups = identity, last_counts;
  for (int step = 0; step < 2; ++step) {
    if (step == 1) {
      EXPECT_FALSE(torch::equal(want_groups, identity));  // the loads did reorder the groups
    }
    for (int micro_batch = 0; micro_batch < 2; ++micro_batch) {
      SCOPED_TRACE(testing::Message() << "step " << step << ", micro-batch " << micro_batch);
      const auto values = (torch::randn({299, config.hidden_size}) + 3.0 * shared).to(device, torch::kBFloat16);
      const auto upstream = torch::randn({299, config.hidden_size}).to(device);
      std::vector<torch::Tensor> outputs, input_grads;
      for (auto* block : {&ordered, &busiest}) {
        auto x = values.clone().requires_grad_();
        RouterLoad load;
        AccumulateIntoGrad scope;
        auto y = (*block)(x, backend, &load);
        (y.to(torch::kFloat32) * upstream).sum().backward();
        outputs.push_back(y);
        input_grads.push_back(x.grad());
        last_counts = load.layer_counts.front();
      }
      EXPECT_TRUE(torch::equal(outputs[0], outputs[1]));
      EXPECT_TRUE(torch::equal(input_grads[0], input_grads[1]));
      ASSERT_TRUE(busiest->group_experts().defined());
      EXPECT_TRUE(torch::equal(busiest->group_experts(), want_groups));
    }
    const auto from = ordered->parameters();
    const auto to = busiest->parameters();
    for (size_t i = 0; i < from.size(); ++i) EXPECT_TRUE(torch::equal(from[i].grad(), to[i].grad())) << i;
    want_groups = std::get<1>(last_counts.sort(/*stable=*/true, 0, /*descending=*/true));
    torch::NoGradGuard no_grad;  // an optimizer step: the masters change, the copies go stale
    for (auto* block : {&ordered, &busiest})
      for (auto& p : (*block)->parameters()) p.add_(p.grad() * -0.01);
  }
}

}  // namespace topotrain::model::test_support
