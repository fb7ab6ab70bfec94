#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "topotrain/train/adamw.h"

using namespace topotrain;

namespace {

torch::Tensor loss_of(const torch::Tensor& w, const torch::Tensor& b, const torch::Tensor& x) {
  return (torch::tanh(x.matmul(w) + b)).pow(2).sum();
}

}  // namespace

// Against LibTorch's own AdamW: decayed matrix in one group, undecayed vector in another.
TEST(AdamW, MatchesTorchAdamWWithDecayOnMatricesOnly) {
  at::set_num_threads(1);
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({8, 5});
  torch::Tensor w0 = torch::randn({5, 3}), b0 = torch::randn({3});
  torch::Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  torch::Tensor rw = w0.clone().requires_grad_(), rb = b0.clone().requires_grad_();

  AdamWConfig config{0.9, 0.95, 1e-8, 0.1};
  AdamW ours({{"w", w}, {"b", b}}, config);
  auto with = torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1);
  auto without = torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{rw}, std::make_unique<torch::optim::AdamWOptions>(with));
  groups.emplace_back(std::vector<torch::Tensor>{rb}, std::make_unique<torch::optim::AdamWOptions>(without));
  torch::optim::AdamW reference(groups, with);

  for (int step = 0; step < 20; ++step) {
    w.mutable_grad() = torch::Tensor();
    b.mutable_grad() = torch::Tensor();
    loss_of(w, b, x).backward();
    ours.step(1e-2);
    reference.zero_grad();
    loss_of(rw, rb, x).backward();
    reference.step();
  }
  EXPECT_TRUE(torch::allclose(w, rw, 1e-5, 1e-6)) << (w - rw).abs().max();
  EXPECT_TRUE(torch::allclose(b, rb, 1e-5, 1e-6)) << (b - rb).abs().max();
  EXPECT_EQ(ours.steps(), 20);
}

TEST(AdamW, StateRoundTripContinuesIdentically) {
  torch::manual_seed(1);
  torch::Tensor x = torch::randn({4, 3});
  auto run = [&](torch::Tensor w, AdamW& opt, int steps) {
    for (int i = 0; i < steps; ++i) {
      w.mutable_grad() = torch::Tensor();
      loss_of(w, torch::zeros({2}), x).backward();
      opt.step(1e-2);
    }
  };
  torch::Tensor w0 = torch::randn({3, 2});
  torch::Tensor a = w0.clone().requires_grad_();
  AdamW straight({{"w", a}}, {});
  run(a, straight, 6);

  torch::Tensor b = w0.clone().requires_grad_();
  AdamW first({{"w", b}}, {});
  run(b, first, 3);
  std::vector<std::pair<std::string, torch::Tensor>> saved;
  for (auto& [name, t] : first.state()) saved.emplace_back(name, t.clone());
  torch::Tensor c = b.detach().clone().requires_grad_();
  AdamW resumed({{"w", c}}, {});
  resumed.load_state(saved, first.steps());
  run(c, resumed, 3);
  EXPECT_TRUE(torch::equal(a, c));
}

// step(lr, f) is step(lr) on gradients multiplied by f first, and leaves them as they were.
TEST(AdamW, AGradientFactorActsAsGradientsMultipliedFirst) {
  torch::manual_seed(2);
  const torch::Tensor x = torch::randn({4, 3}), w0 = torch::randn({3, 2}), b0 = torch::randn({2});
  const double factor = 0.37;
  torch::Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  torch::Tensor rw = w0.clone().requires_grad_(), rb = b0.clone().requires_grad_();
  AdamW ours({{"w", w}, {"b", b}}, {}), reference({{"w", rw}, {"b", rb}}, {});
  for (int step = 0; step < 3; ++step) {
    for (auto* p : {&w, &b, &rw, &rb}) p->mutable_grad() = torch::Tensor();
    loss_of(w, b, x).backward();
    ours.step(1e-2, factor);
    loss_of(rw, rb, x).backward();
    {
      torch::NoGradGuard no_grad;
      rw.mutable_grad().mul_(factor);
      rb.mutable_grad().mul_(factor);
    }
    reference.step(1e-2);
    EXPECT_TRUE(torch::equal(w.grad() * factor, rw.grad()));
  }
  EXPECT_TRUE(torch::equal(w, rw));
  EXPECT_TRUE(torch::equal(b, rb));
}

// A factor held in a tensor acts as the same factor given as a number; a non-finite one
// changes nothing, and unstep() takes its step count back so that the next step is the one a
// run that never tried it takes (bias correction included).
TEST(AdamW, AFactorTensorActsAsTheNumberAndANonFiniteOneSkipsUntilUnstepped) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({4, 3}), w0 = torch::randn({3, 2}), b0 = torch::randn({2});
  torch::Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  torch::Tensor rw = w0.clone().requires_grad_(), rb = b0.clone().requires_grad_();
  AdamW ours({{"w", w}, {"b", b}}, {}), reference({{"w", rw}, {"b", rb}}, {});
  auto gradients = [&] {
    for (auto* p : {&w, &b, &rw, &rb}) p->mutable_grad() = torch::Tensor();
    loss_of(w, b, x).backward();
    loss_of(rw, rb, x).backward();
  };
  const std::vector<double> factors{0.37, std::nan(""), 1.0, INFINITY, 0.5};
  for (double factor : factors) {
    gradients();
    ours.step(1e-2, torch::tensor(factor, torch::kFloat64));
    if (std::isfinite(factor)) {
      reference.step(1e-2, factor);
    } else {
      for (auto& [name, moment] : ours.state()) {
        for (auto& [other, want] : reference.state()) {
          if (other != name) continue;
          EXPECT_TRUE(torch::equal(moment, want)) << name;
        }
      }
      ours.unstep();
    }
    EXPECT_EQ(ours.steps(), reference.steps());
    EXPECT_TRUE(torch::equal(w, rw));
    EXPECT_TRUE(torch::equal(b, rb));
  }
  EXPECT_THROW(ours.step(1e-2, torch::tensor(1.0f)), std::logic_error) << "an fp32 factor";
  EXPECT_THROW(ours.step(1e-2, torch::ones({2}, torch::kFloat64)), std::logic_error) << "two factors";
  AdamW fresh({{"w", w}}, {});
  EXPECT_THROW(fresh.unstep(), std::logic_error);
}

TEST(AdamW, RejectsNonFp32MasterWeights) {
  torch::Tensor half = torch::zeros({2, 2}, torch::kBFloat16).requires_grad_();
  EXPECT_THROW(AdamW({{"h", half}}, {}), std::invalid_argument);
}
