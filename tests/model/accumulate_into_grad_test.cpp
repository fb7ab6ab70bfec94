// model::AccumulateIntoGrad on CPU: inside the scope the masters' gradients (the projections,
// the experts, the LM head, the embedding table, tied or not) are added into .grad() by the op
// and reach autograd as none, while every AccumulateGrad node still runs once per micro-batch
// (what the GradReducer's ready hook counts on); the accumulated gradients equal autograd's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "into_grad_check.h"
#include "topotrain/model/accumulate_into_grad.h"
#include "topotrain/model/compute_weight.h"

namespace mdl = topotrain::model;
namespace support = topotrain::model::test_support;

namespace {

class AccumulateIntoGradTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(5);
  }
};

}  // namespace

TEST_F(AccumulateIntoGradTest, GradientsEqualAutogradsAndEveryAccumulatorStillRuns) {
  for (const char* name : {"tiny-dense", "tiny-moe"}) support::expect_into_grad_matches_autograd(name, torch::kCPU);
}

TEST_F(AccumulateIntoGradTest, MasterWithoutGradGetsItThroughAutogradInsideTheScope) {
  auto a = torch::randn({3, 4}).requires_grad_(), b = torch::randn({2, 4}).requires_grad_();
  b.mutable_grad() = torch::ones({2, 4});
  auto r = torch::randn({5, 4}).to(torch::kBFloat16);
  mdl::ComputeWeight weight;
  {
    mdl::AccumulateIntoGrad scope;
    (weight.get({a, b}, torch::kBFloat16).to(torch::kFloat32) * r.to(torch::kFloat32)).sum().backward();
  }
  EXPECT_TRUE(torch::equal(a.grad(), r.narrow(0, 0, 3).to(torch::kFloat32)));
  EXPECT_TRUE(torch::equal(b.grad(), 1 + r.narrow(0, 3, 2).to(torch::kFloat32)));
  EXPECT_FALSE(mdl::AccumulateIntoGrad::active());
  EXPECT_THROW(mdl::add_into_grad(b, torch::ones({4, 2})), std::invalid_argument);
  EXPECT_THROW(mdl::add_rows_into_grad(b, torch::zeros({3}, torch::kInt64), torch::ones({2, 4})),
               std::invalid_argument);
  EXPECT_THROW(mdl::add_permuted_into_grad(b, torch::arange(3), torch::ones({2, 4})), std::invalid_argument);
}
