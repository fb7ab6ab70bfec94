// ComputeWeight on CPU: the kept compute-dtype copy equals a fresh cast, routes gradients to
// each master, is reused while the masters are unchanged and remade when one changes; a
// model whose copies were made before an update computes what a fresh model does after it; a
// copy in a row order gathers and scatters back each row.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "topotrain/model/accumulate_into_grad.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/compute_weight.h"
#include "topotrain/model/lm_loss.h"

namespace mdl = topotrain::model;
using topotrain::PackedBatch;

namespace {

class ComputeWeightTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(9);
  }
};

}  // namespace

TEST_F(ComputeWeightTest, CopyIsTheCastConcatenationAndRoutesGradientsToEachMaster) {
  auto a = torch::randn({3, 4}).requires_grad_(), b = torch::randn({2, 4}).requires_grad_();
  auto r = torch::randn({5, 4}, torch::kFloat64);
  mdl::ComputeWeight weight;
  for (int micro_batch = 1; micro_batch <= 2; ++micro_batch) {
    auto w = weight.get({a, b}, torch::kFloat64);
    EXPECT_TRUE(torch::equal(w, torch::cat({a, b}).to(torch::kFloat64)));
    (w * r).sum().backward();
    // Gradients in the masters' dtype, accumulating over micro-batches as autograd's do.
    EXPECT_EQ(a.grad().scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::equal(a.grad(), micro_batch * r.narrow(0, 0, 3).to(torch::kFloat32)));
    EXPECT_TRUE(torch::equal(b.grad(), micro_batch * r.narrow(0, 3, 2).to(torch::kFloat32)));
  }
}

TEST_F(ComputeWeightTest, CopyIsKeptWhileTheMastersAreUnchangedAndRemadeAfterAnInPlaceUpdate) {
  auto a = torch::randn({3, 4}).requires_grad_(), b = torch::randn({2, 4}).requires_grad_();
  mdl::ComputeWeight weight;
  const auto first = weight.values({a, b}, torch::kBFloat16);
  EXPECT_EQ(weight.values({a, b}, torch::kBFloat16).data_ptr(), first.data_ptr());  // no new cast
  {
    torch::NoGradGuard no_grad;  // as an optimizer step updates its parameters
    b.add_(1.0);
  }
  const auto after = weight.values({a, b}, torch::kBFloat16);
  EXPECT_TRUE(torch::equal(after, torch::cat({a, b}).to(torch::kBFloat16)));
  EXPECT_FALSE(torch::equal(after, first));
  // Another dtype or another set of masters is another copy.
  EXPECT_TRUE(torch::equal(weight.values({a}, torch::kFloat64), a.to(torch::kFloat64)));
  // Without grad mode nothing is kept (a frozen model's forward stays one layer's cast at a time).
  torch::Tensor untracked;
  {
    torch::NoGradGuard no_grad;
    untracked = weight.get({a, b}, torch::kBFloat16);
    EXPECT_FALSE(untracked.requires_grad());
  }
  EXPECT_NE(weight.values({a, b}, torch::kBFloat16).data_ptr(), untracked.data_ptr());
}

TEST_F(ComputeWeightTest, ModelAfterAParameterUpdateComputesWhatAFreshModelDoes) {
  for (const char* name : {"tiny-dense", "tiny-moe"}) {
    SCOPED_TRACE(name);
    const auto config = mdl::ModelConfig::preset(name);
    mdl::CausalLM model(config), fresh(config);
    model->set_compute_dtype(torch::kBFloat16);
    fresh->set_compute_dtype(torch::kBFloat16);
    const auto batch = PackedBatch::from_documents({{1, 5, 9, 2, 7}, {3, 3, 8}});
    auto loss = [&](mdl::CausalLMImpl& m) {
      auto out = m.forward_backbone(batch);
      return mdl::lm_loss(m, out.hidden, batch).loss_sum;
    };
    loss(*model).backward();  // makes and keeps every compute-dtype copy
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.05);
      auto to = fresh->parameters();
      auto from = model->parameters();
      for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
    }
    EXPECT_TRUE(torch::equal(loss(*model), loss(*fresh)));
  }
}

// A row order (the experts' busiest-first layout): the copy's row i is master row rows[i], its
// gradient goes back to master row rows[i] through autograd and, inside an AccumulateIntoGrad
// scope, into .grad() directly; the copy is kept for the same order tensor only.
TEST_F(ComputeWeightTest, CopyInARowOrderTakesAndGivesBackEachRowAtItsMasterRow) {
  auto a = torch::randn({4, 2, 8}).requires_grad_();
  const auto rows = torch::tensor({2, 0, 3, 1}, torch::kInt64);
  const auto r = torch::randn({4, 2, 8});
  // The reference: the master's rows gathered by hand, then cast.
  const auto want = torch::stack({a[2], a[0], a[3], a[1]}).to(torch::kBFloat16);
  const auto want_grad = torch::stack({r[1], r[3], r[0], r[2]});  // master row m gets the copy row i with rows[i] = m
  mdl::ComputeWeight weight;
  auto w = weight.get({a}, torch::kBFloat16, rows);
  EXPECT_TRUE(torch::equal(w, want));
  (w.to(torch::kFloat32) * r).sum().backward();
  EXPECT_TRUE(torch::equal(a.grad(), want_grad.to(torch::kBFloat16).to(torch::kFloat32)));
  {
    mdl::AccumulateIntoGrad scope;  // .grad() is defined now: the add goes straight into it
    (weight.get({a}, torch::kBFloat16, rows).to(torch::kFloat32) * r).sum().backward();
  }
  EXPECT_TRUE(torch::equal(a.grad(), 2 * want_grad.to(torch::kBFloat16).to(torch::kFloat32)));
  // Kept for the same order tensor; another order (even of equal values) or none is a new cast.
  EXPECT_TRUE(weight.current({a}, torch::kBFloat16, rows));
  EXPECT_FALSE(weight.current({a}, torch::kBFloat16, rows.clone()));
  EXPECT_FALSE(weight.current({a}, torch::kBFloat16));
  EXPECT_TRUE(torch::equal(weight.values({a}, torch::kBFloat16), a.to(torch::kBFloat16)));
  EXPECT_FALSE(weight.current({a}, torch::kBFloat16, rows));
  // A master already in the compute dtype is gathered (its gradient through autograd).
  EXPECT_TRUE(torch::equal(weight.get({a}, torch::kFloat32, rows), torch::stack({a[2], a[0], a[3], a[1]})));
  // An order takes one master of as many rows.
  auto b = torch::randn({2, 2, 8});
  EXPECT_THROW(weight.get({a, b}, torch::kBFloat16, rows), std::invalid_argument);
  EXPECT_THROW(weight.get({b}, torch::kBFloat16, rows), std::invalid_argument);
}
