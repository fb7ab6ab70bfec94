// Our CUDA kernels (RMSNorm with and without the residual add, SwiGLU, per-head norm + rotary
// alone and over a fused q/k/v projection, row cross-entropy and its weight gradient, MoE
// combine and dispatch, the router and its GEMM, bf16 gradients added into an fp32 .grad(),
// whole or by rows) against the torch-op path run in fp32 on the same bf16 inputs: outputs and
// every gradient. Also: the LM loss enqueues without waiting for the device, gradients the ops
// add into .grad() (AccumulateIntoGrad) equal autograd's, and the experts' busiest-first layout
// (a weight copy cast in a row order, its gradient added back through it) equals expert order.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "expert_layout_check.h"
#include "into_grad_check.h"
#include "topotrain/batch/packed_batch.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/compute_weight.h"
#include "topotrain/model/config.h"
#include "topotrain/model/lm_loss.h"
#include "topotrain/model/moe.h"
#include "topotrain/model/rms_norm.h"
#include "topotrain/model/rotary.h"
#include "topotrain/model/swiglu.h"
#include "topotrain/torch_compat.h"

#ifdef TOPOTRAIN_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace mdl = topotrain::model;
namespace test_support = topotrain::model::test_support;

namespace {

const auto kBf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);

// max |a - b| relative to max |b|
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  auto bf = b.to(torch::kFloat32);
  return ((a.to(torch::kFloat32) - bf).abs().max() / bf.abs().max().clamp_min(1e-12)).item<double>();
}

// A bf16 leaf on the GPU and its fp32 copy (a separate leaf) for the reference path.
struct Pair {
  torch::Tensor bf16, fp32;
};
Pair leaf_pair(const std::vector<int64_t>& shape, double scale = 1.0) {
  auto values = (torch::randn(shape, kBf16) * scale).to(torch::kBFloat16);
  return {values.clone().requires_grad_(), values.to(torch::kFloat32).requires_grad_()};
}

class FusedOpsGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
    torch::manual_seed(11);
  }
};

}  // namespace

TEST_F(FusedOpsGpu, RmsNormWithAndWithoutTheResidualAddMatchesTorchOpsInFp32) {
  for (int64_t hidden : {24, 768, 1024, 4096, 8192}) {
    SCOPED_TRACE(hidden);
    const int64_t rows = 257;
    auto x = leaf_pair({rows, hidden}, 3.0);
    auto residual = leaf_pair({rows, hidden});
    auto w = (torch::rand({hidden}, kBf16.dtype(torch::kFloat32)) + 0.5).requires_grad_();
    auto w_ref = w.detach().clone().requires_grad_();
    auto up_sum = torch::randn({rows, hidden}, kBf16), up_normed = torch::randn({rows, hidden}, kBf16);
    auto plain = mdl::rms_norm(x.bf16, w, 1e-6);
    auto plain_ref = mdl::rms_norm(x.fp32, w_ref, 1e-6);
    EXPECT_LT(relative_error(plain, plain_ref), 1e-2);
    auto fused = mdl::add_rms_norm(x.bf16, residual.bf16, w, 1e-6);
    auto fused_ref = mdl::add_rms_norm(x.fp32, residual.fp32, w_ref, 1e-6);
    EXPECT_LT(relative_error(fused.sum, fused_ref.sum), 1e-2);
    EXPECT_LT(relative_error(fused.normed, fused_ref.normed), 1e-2);
    // Every output feeds the loss, the sum also directly (its use by the next residual add).
    auto loss = [&](const torch::Tensor& a, const torch::Tensor& s, const torch::Tensor& n) {
      return ((a.to(torch::kFloat32) + n.to(torch::kFloat32)) * up_normed.to(torch::kFloat32) +
              s.to(torch::kFloat32) * up_sum.to(torch::kFloat32))
          .sum();
    };
    loss(plain, fused.sum, fused.normed).backward();
    loss(plain_ref, fused_ref.sum, fused_ref.normed).backward();
    EXPECT_LT(relative_error(x.bf16.grad(), x.fp32.grad()), 2e-2);
    EXPECT_LT(relative_error(residual.bf16.grad(), residual.fp32.grad()), 2e-2);
    EXPECT_LT(relative_error(w.grad(), w_ref.grad()), 1e-2);
  }
}

TEST_F(FusedOpsGpu, SwigluMatchesTorchOpsInFp32) {
  auto gate_up = leaf_pair({1000, 2 * 96}, 3.0);
  auto upstream = torch::randn({1000, 96}, kBf16);
  auto out = mdl::swiglu(gate_up.bf16);
  auto ref = mdl::swiglu(gate_up.fp32);
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  EXPECT_LT(relative_error(out, ref), 1e-2);
  (out.to(torch::kFloat32) * upstream.to(torch::kFloat32)).sum().backward();
  (ref * upstream.to(torch::kFloat32)).sum().backward();
  EXPECT_LT(relative_error(gate_up.bf16.grad(), gate_up.fp32.grad()), 1e-2);
}

TEST_F(FusedOpsGpu, NormRotaryOfAStridedSliceMatchesTorchOpsInFp32) {
  for (int64_t dim : {64, 128, 256}) {
    SCOPED_TRACE(dim);
    const int64_t tokens = 300, heads = 3;
    // x is the middle column slice of a fused projection, as q and k of the fused QKV are.
    auto base = leaf_pair({tokens, (heads + 2) * dim}, 2.0);
    auto slice = [&](const torch::Tensor& t) { return t.narrow(1, dim, heads * dim).view({tokens, heads, dim}); };
    auto w32 = (torch::rand({dim}, kBf16.dtype(torch::kFloat32)) + 0.5).requires_grad_();
    auto w32_ref = w32.detach().clone().requires_grad_();
    auto positions = torch::randint(0, 4000, {tokens}, kBf16.dtype(torch::kInt64));
    const auto tables =
        mdl::rotary_tables(positions, mdl::rope_inverse_frequencies(dim, 1e6, {}, positions.device()), torch::kBFloat16);
    const mdl::RotaryTables tables32{tables.cos.to(torch::kFloat32), tables.sin.to(torch::kFloat32)};
    auto upstream = torch::randn({tokens, heads, dim}, kBf16);

    auto out = mdl::norm_rotary(slice(base.bf16), w32, 1e-6, tables);
    auto ref = mdl::norm_rotary(slice(base.fp32), w32_ref, 1e-6, tables32);
    EXPECT_TRUE(out.is_contiguous());
    EXPECT_LT(relative_error(out, ref), 1e-2);
    (out.to(torch::kFloat32) * upstream.to(torch::kFloat32)).sum().backward();
    (ref * upstream.to(torch::kFloat32)).sum().backward();
    EXPECT_LT(relative_error(base.bf16.grad(), base.fp32.grad()), 1e-2);
    EXPECT_EQ(base.bf16.grad().narrow(1, 0, dim).abs().max().item<float>(), 0.0f);  // outside the slice
    EXPECT_LT(relative_error(w32.grad(), w32_ref.grad()), 1e-3);
  }
}

// q | k | v of a fused projection through one autograd function: outputs and the gradients of
// the projection and both norm weights against the split + norm_rotary path in fp32, v a view
// (no copy), and an unused output's columns get a zero gradient.
TEST_F(FusedOpsGpu, RotatedHeadsOfAFusedProjectionMatchTorchOpsInFp32) {
  const int64_t tokens = 300, q_heads = 4, kv_heads = 2, dim = 128;
  auto fused = leaf_pair({tokens, (q_heads + 2 * kv_heads) * dim}, 2.0);
  auto weights = [&] {
    auto w = (torch::rand({dim}, kBf16.dtype(torch::kFloat32)) + 0.5).requires_grad_();
    return std::make_pair(w, w.detach().clone().requires_grad_());
  };
  auto [qw, qw_ref] = weights();
  auto [kw, kw_ref] = weights();
  auto positions = torch::randint(0, 4000, {tokens}, kBf16.dtype(torch::kInt64));
  const auto tables =
        mdl::rotary_tables(positions, mdl::rope_inverse_frequencies(dim, 1e6, {}, positions.device()), torch::kBFloat16);
  const mdl::RotaryTables tables32{tables.cos.to(torch::kFloat32), tables.sin.to(torch::kFloat32)};

  auto out = mdl::rotated_heads(fused.bf16, q_heads, kv_heads, qw, kw, 1e-6, tables);
  auto ref = mdl::rotated_heads(fused.fp32, q_heads, kv_heads, qw_ref, kw_ref, 1e-6, tables32);
  EXPECT_EQ(out.v.data_ptr(), static_cast<void*>(fused.bf16.data_ptr<at::BFloat16>() + (q_heads + kv_heads) * dim));
  EXPECT_LT(relative_error(out.q, ref.q), 1e-2);
  EXPECT_LT(relative_error(out.k, ref.k), 1e-2);
  EXPECT_LT(relative_error(out.v, ref.v), 1e-6);
  auto up_q = torch::randn({tokens, q_heads, dim}, kBf16), up_k = torch::randn({tokens, kv_heads, dim}, kBf16),
       up_v = torch::randn({tokens, kv_heads, dim}, kBf16);
  auto dot = [](const torch::Tensor& a, const torch::Tensor& b) {
    return (a.to(torch::kFloat32) * b.to(torch::kFloat32)).sum();
  };
  (dot(out.q, up_q) + dot(out.k, up_k) + dot(out.v, up_v)).backward();
  (dot(ref.q, up_q) + dot(ref.k, up_k) + dot(ref.v, up_v)).backward();
  EXPECT_LT(relative_error(fused.bf16.grad(), fused.fp32.grad()), 1e-2);
  EXPECT_LT(relative_error(qw.grad(), qw_ref.grad()), 1e-3);
  EXPECT_LT(relative_error(kw.grad(), kw_ref.grad()), 1e-3);

  // Only q used: k's and v's columns of the gradient are zero.
  auto only_q = mdl::rotated_heads(fused.bf16, q_heads, kv_heads, qw, kw, 1e-6, tables).q;
  auto grad = torch::autograd::grad({dot(only_q, up_q)}, {fused.bf16})[0];
  EXPECT_EQ(grad.narrow(1, q_heads * dim, 2 * kv_heads * dim).abs().max().item<float>(), 0.0f);
  EXPECT_GT(grad.narrow(1, 0, q_heads * dim).abs().max().item<float>(), 0.0f);
}

TEST_F(FusedOpsGpu, ExpertCombineThroughAPermutationMatchesTorchOpsInFp32) {
  const int64_t tokens = 500, k = 3, hidden = 136;
  auto y = leaf_pair({tokens * k, hidden});
  const auto rows = torch::randperm(tokens * k, kBf16.dtype(torch::kInt64)).view({tokens, k});
  auto w = torch::rand({tokens, k}, kBf16.dtype(torch::kFloat32)).requires_grad_();
  auto w_ref = w.detach().clone().requires_grad_();
  auto upstream = torch::randn({tokens, hidden}, kBf16);
  auto out = mdl::combine_expert_outputs(y.bf16, rows, w);
  auto ref = mdl::combine_expert_outputs(y.fp32, rows, w_ref);
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  EXPECT_LT(relative_error(out, ref), 1e-2);
  (out.to(torch::kFloat32) * upstream.to(torch::kFloat32)).sum().backward();
  (ref * upstream.to(torch::kFloat32)).sum().backward();
  EXPECT_LT(relative_error(y.bf16.grad(), y.fp32.grad()), 1e-2);
  EXPECT_LT(relative_error(w.grad(), w_ref.grad()), 1e-2);
  // Independent of both paths: token 7's output by hand in fp32.
  auto by_hand = torch::zeros({hidden}, kBf16.dtype(torch::kFloat32));
  for (int64_t j = 0; j < k; ++j) by_hand += w[7][j].detach() * y.fp32[rows[7][j].item<int64_t>()].detach();
  EXPECT_LT(relative_error(out[7], by_hand), 1e-2);
}

// The router kernel against softmax, topk and the division as torch ops on the same fp32
// logits: probabilities, choices, weights, counts and the logits' gradient, at expert counts
// that fill one to eight registers per lane (200: the last lane's slots part empty), top-1 and
// top-8, with and without renormalisation, and with only the weights read (no gradient for the
// probabilities).
TEST_F(FusedOpsGpu, RouterSoftmaxTopKMatchesTorchOps) {
  const auto fp32 = kBf16.dtype(torch::kFloat32);
  for (int64_t experts : {16, 128, 200}) {
    for (int64_t k : {1, 8}) {
      for (bool renormalize : {true, false}) {
        SCOPED_TRACE(testing::Message() << experts << " experts, top-" << k << (renormalize ? ", renormalised" : ""));
        const int64_t tokens = 333;
        const auto logits = (torch::randn({tokens, experts}, fp32) * 3).requires_grad_();
        const auto logits_ref = logits.detach().clone().requires_grad_();
        const auto got = mdl::route_tokens(logits, k, renormalize);
        const auto probs = torch::softmax(logits_ref, -1);
        auto [weights, selected] = probs.topk(k, -1);
        if (renormalize) weights = weights / weights.sum(-1, true);
        EXPECT_EQ(got.selected.scalar_type(), torch::kUInt8);
        EXPECT_TRUE(torch::equal(got.selected.to(torch::kInt64), selected));
        const auto counts = torch::bincount(selected.reshape({-1}), {}, experts);
        EXPECT_TRUE(torch::equal(got.counts.to(torch::kInt64), counts));
        EXPECT_LT(relative_error(got.probs, probs), 1e-6);
        EXPECT_LT(relative_error(got.weights, weights), 1e-6);
        const auto up_probs = torch::randn({tokens, experts}, fp32), up_weights = torch::randn({tokens, k}, fp32);
        auto objective = [&](const torch::Tensor& p, const torch::Tensor& w, bool read_probs) {
          auto sum = (w * up_weights).sum();
          return read_probs ? sum + (p * up_probs).sum() : sum;
        };
        for (bool read_probs : {true, false}) {
          const auto grad = torch::autograd::grad({objective(got.probs, got.weights, read_probs)}, {logits}, {},
                                                  /*retain_graph=*/true)[0];
          const auto grad_ref = torch::autograd::grad({objective(probs, weights, read_probs)}, {logits_ref}, {},
                                                      /*retain_graph=*/true)[0];
          // Relative to the upstream values' scale (1): top-1 renormalised weights are constant
          // 1, and the gradient through them is zero but for rounding.
          const double scale = std::max(1.0, grad_ref.abs().max().item<double>());
          EXPECT_LT((grad - grad_ref).abs().max().item<double>() / scale, 1e-5)
              << (read_probs ? "probs and weights read" : "weights read");
        }
      }
    }
  }
  // Equal probabilities: the lower experts win, in order (torch leaves the order of ties open).
  const auto tied = mdl::route_tokens(torch::zeros({4, 16}, fp32), 3, /*renormalize=*/false);
  const auto lowest_three = torch::arange(3, fp32.dtype(torch::kInt64)).expand({4, 3});
  EXPECT_TRUE(torch::equal(tied.selected.to(torch::kInt64), lowest_three));
  EXPECT_LT(relative_error(tied.weights, torch::full({4, 3}, 1.0 / 16, fp32)), 1e-6);
}

// The router GEMM's kernels against x.to(fp32) @ weight.t() through torch: the logits and the
// gradients of x and the weight, at both forward tiles (8 and 16 experts, 16 at 1536 columns in
// three tiles with the last partly empty), hidden sizes below one 256-column slice and at the
// largest the kernels take, token counts that leave warps and weight-gradient chunks partly
// empty, and no tokens at all. The weight gradient is the same bits when run again.
TEST_F(FusedOpsGpu, RouterLogitsMatchTheFp32GemmOfTheBf16Input) {
  const auto fp32 = kBf16.dtype(torch::kFloat32);
  struct Shape {
    int64_t tokens, experts, hidden;
  };
  for (const auto& shape : {Shape{333, 16, 1024}, Shape{1001, 8, 768}, Shape{4097, 12, 72}, Shape{70, 64, 3072},
                            Shape{5, 40, 1536}, Shape{0, 16, 1024}}) {
    SCOPED_TRACE(testing::Message() << shape.tokens << " tokens, " << shape.experts << " experts, hidden "
                                    << shape.hidden);
    auto x = leaf_pair({shape.tokens, shape.hidden});
    const auto weight = (torch::randn({shape.experts, shape.hidden}, fp32) * 0.02).requires_grad_();
    const auto weight_ref = weight.detach().clone().requires_grad_();
    const auto logits = mdl::router_logits(x.bf16, weight);
    const auto logits_ref = torch::matmul(x.fp32, weight_ref.t());
    ASSERT_EQ(logits.scalar_type(), torch::kFloat32);
    ASSERT_EQ(logits.sizes(), logits_ref.sizes());
    const auto upstream = torch::randn_like(logits_ref);
    const auto grads = torch::autograd::grad({(logits * upstream).sum()}, {x.bf16, weight});
    const auto grads_ref = torch::autograd::grad({(logits_ref * upstream).sum()}, {x.fp32, weight_ref});
    if (shape.tokens == 0) {
      EXPECT_EQ(grads[0].sizes(), x.bf16.sizes());
      EXPECT_TRUE(torch::equal(grads[1], torch::zeros_like(weight)));
      continue;
    }
    EXPECT_LT(relative_error(logits, logits_ref), 1e-5);
    EXPECT_EQ(grads[0].scalar_type(), torch::kBFloat16);
    EXPECT_LT(relative_error(grads[0], grads_ref[0]), 1e-2);  // one bf16 rounding
    EXPECT_LT(relative_error(grads[1], grads_ref[1]), 1e-5);
    const auto again = torch::autograd::grad({(mdl::router_logits(x.bf16, weight) * upstream).sum()}, {weight})[0];
    EXPECT_TRUE(torch::equal(again, grads[1]));
  }
}

// The whole sparse block in bf16 (grouped GEMMs, the fused combine and the dispatch's fused
// backward) against the same block in fp32 through torch ops, at top-2 and at the kernels'
// largest k: the output and the gradients of the input, the router and the experts.
TEST_F(FusedOpsGpu, SparseMoeBlockInBf16MatchesItsFp32TorchOpPath) {
  for (int64_t k : {2, 8}) {
    SCOPED_TRACE(k);
    auto config = mdl::ModelConfig::preset("tiny-moe");
    config.hidden_size = 128, config.moe_intermediate_size = 64;
    config.num_experts = 16, config.num_experts_per_tok = k;
    mdl::SparseMoeBlock block(config);
    block->to(torch::kCUDA);
    auto x = leaf_pair({777, config.hidden_size});
    const auto upstream = torch::randn({777, config.hidden_size}, kBf16.dtype(torch::kFloat32));
    const auto params = std::vector<torch::Tensor>{block->gate->weight, block->experts->gate_up_proj,
                                                   block->experts->down_proj};
    auto run = [&](const torch::Tensor& input, mdl::ExpertBackend backend) {
      auto out = block(input, backend, nullptr);
      std::vector<torch::Tensor> wrt{input};
      wrt.insert(wrt.end(), params.begin(), params.end());
      auto grads = torch::autograd::grad({(out.to(torch::kFloat32) * upstream).sum()}, wrt);
      grads.insert(grads.begin(), out);
      return grads;
    };
    const auto backend = mdl::choose_expert_backend(x.bf16.device(), torch::kBFloat16, config);
    const auto got = run(x.bf16, backend);
    const auto want = run(x.fp32, mdl::ExpertBackend::sorted_loop);
    const char* names[] = {"output", "grad x", "grad router", "grad gate_up", "grad down"};
    for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(relative_error(got[i], want[i]), 2e-2) << names[i];
  }
}

// The experts' busiest-first layout on the grouped GEMMs (expert_layout_check.h): the order of
// the groups moves tiles between CTAs, not a tile's sum.
TEST_F(FusedOpsGpu, BusiestFirstExpertLayoutEqualsExpertOrderBitForBitOnTheGroupedGemms) {
  test_support::expect_busiest_first_equals_expert_order(torch::kCUDA, mdl::ExpertBackend::grouped_mm);
}

// A compute copy in a row order (ComputeWeight's rows, the busiest-first layout's weights): the
// cast reading through the order and the gradient added back through it (own kernels) equal
// torch's gather, cast and index_add.
TEST_F(FusedOpsGpu, CopyInARowOrderIsCastAndAddedBackThroughTheOrder) {
  const auto fp32 = kBf16.dtype(torch::kFloat32);
  auto master = torch::randn({16, 64, 40}, fp32).requires_grad_();
  const auto rows = torch::randperm(16, kBf16.dtype(torch::kInt64));
  mdl::ComputeWeight weight;
  EXPECT_TRUE(torch::equal(weight.get({master}, torch::kBFloat16, rows),
                           master.detach().index_select(0, rows).to(torch::kBFloat16)));
  master.mutable_grad() = torch::randn_like(master);
  const auto before = master.grad().clone();
  const auto upstream = torch::randn({16, 64, 40}, kBf16);
  {
    mdl::AccumulateIntoGrad scope;
    (weight.get({master}, torch::kBFloat16, rows).to(torch::kFloat32) * upstream.to(torch::kFloat32)).sum().backward();
  }
  EXPECT_TRUE(torch::equal(master.grad(), before.index_add(0, rows, upstream.to(torch::kFloat32))));
}

TEST_F(FusedOpsGpu, RowCrossEntropyMatchesTorchOpsInFp32) {
  const int64_t rows = 300, hidden_size = 64, vocab = 1000;
  auto hidden = leaf_pair({rows, hidden_size});
  auto weight = leaf_pair({vocab, hidden_size}, 0.5);
  auto targets = torch::randint(0, vocab, {rows}, kBf16.dtype(torch::kInt64));
  mdl::LinearCrossEntropyOptions options;
  options.chunk_rows = 128;  // two full chunks and a partial one
  options.argmax = true;
  options.row_weights = torch::rand({rows}, kBf16.dtype(torch::kFloat32));
  auto out = mdl::linear_cross_entropy(hidden.bf16, weight.bf16, targets, options);
  auto ref = mdl::linear_cross_entropy(hidden.fp32, weight.fp32, targets, options);
  EXPECT_LT(relative_error(out.loss, ref.loss), 1e-2);
  out.loss.backward();
  ref.loss.backward();
  EXPECT_LT(relative_error(hidden.bf16.grad(), hidden.fp32.grad()), 2e-2);
  EXPECT_LT(relative_error(weight.bf16.grad(), weight.fp32.grad()), 2e-2);
  // The chosen token holds the row's maximum of the bf16 logits (ties may pick either).
  auto logits = torch::matmul(hidden.bf16.detach(), weight.bf16.detach().t()).to(torch::kFloat32);
  auto chosen = logits.gather(1, out.argmax.unsqueeze(1)).squeeze(1);
  auto spread = std::get<0>(logits.max(1)) - std::get<0>(logits.min(1));
  EXPECT_TRUE(((std::get<0>(logits.max(1)) - chosen) <= 0.01 * spread).all().item<bool>());
}

// bf16 compute on an fp32 master weight (the model's lm_head): the chunks' weight gradients
// are summed by the GEMM into fp32 and come back in fp32, matching the all-fp32 path.
TEST_F(FusedOpsGpu, CrossEntropyOfAnFp32MasterWeightSumsItsGradientInFp32) {
  const int64_t rows = 300, hidden_size = 64, vocab = 1000;
  auto hidden = leaf_pair({rows, hidden_size});
  auto weight = leaf_pair({vocab, hidden_size}, 0.5);
  auto master = weight.fp32.detach().clone().requires_grad_();
  auto targets = torch::randint(0, vocab, {rows}, kBf16.dtype(torch::kInt64));
  auto out = mdl::linear_cross_entropy_sum(hidden.bf16, master, targets, 128);
  auto ref = mdl::linear_cross_entropy_sum(hidden.fp32, weight.fp32, targets, 128);
  EXPECT_LT(relative_error(out, ref), 1e-2);
  (out * 0.5).backward();
  (ref * 0.5).backward();
  ASSERT_EQ(master.grad().scalar_type(), torch::kFloat32);
  EXPECT_LT(relative_error(master.grad(), weight.fp32.grad()), 2e-2);
  EXPECT_LT(relative_error(hidden.bf16.grad(), hidden.fp32.grad()), 2e-2);
}

TEST_F(FusedOpsGpu, RowCrossEntropyFlagsATargetOutsideTheVocabulary) {
  auto hidden = torch::randn({4, 16}, kBf16);
  auto weight = torch::randn({64, 16}, kBf16);
  auto targets = torch::tensor({1, 2, 64, 3}, kBf16.dtype(torch::kInt64));
  auto loss = mdl::linear_cross_entropy_sum(hidden, weight, targets, 4096);
  EXPECT_TRUE(std::isnan(loss.item<float>()));
}

TEST_F(FusedOpsGpu, Bf16GradientAddedIntoAnFp32GradIsTheCastAndAdd) {
  const auto fp32 = kBf16.dtype(torch::kFloat32);
  // The kernel's sizes (8-value vectors; more than its grid covers in one sweep) and torch's
  // add_ for the rest: a size off the vectors, a .grad() 4 bytes off a 16-byte boundary.
  for (int64_t n : {8, 4096, 40000000, 1000003}) {
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE(n);
      SCOPED_TRACE(offset);
      auto master = torch::zeros({n}, fp32).requires_grad_();
      const auto start = torch::randn({n}, fp32);
      master.mutable_grad() = torch::empty({n + offset}, fp32).narrow(0, offset, n).copy_(start);
      const auto grad = torch::randn({n}, kBf16);
      ASSERT_TRUE(mdl::add_into_grad(master, grad));
      EXPECT_TRUE(torch::equal(master.grad(), start + grad.to(torch::kFloat32)));
    }
  }
}

TEST_F(FusedOpsGpu, EmbeddingRowsAddedIntoGradEqualTheDenseGradientAdded) {
  const auto fp32 = kBf16.dtype(torch::kFloat32);
  // Repeated rows (runs of one row up to 300 long), rows never hit, widths of 1 to 33 vectors.
  for (int64_t columns : {8, 264, 1024}) {
    SCOPED_TRACE(columns);
    const int64_t vocab = 1000, n = 4096;
    auto table = torch::zeros({vocab, columns}, fp32).requires_grad_();
    const auto start = torch::randn({vocab, columns}, fp32);
    table.mutable_grad() = start.clone();
    auto rows = torch::randint(0, 200, {n}, fp32.dtype(torch::kInt64));
    rows.narrow(0, 0, 300).fill_(7);
    const auto grad = torch::randn({n, columns}, kBf16);
    ASSERT_TRUE(mdl::add_rows_into_grad(table, rows, grad));
    const auto expected = start + torch::embedding_backward(grad.to(torch::kFloat32), rows, vocab, -1, false, false);
    EXPECT_LT(relative_error(table.grad(), expected), 1e-6);
    EXPECT_TRUE(torch::equal(table.grad().narrow(0, 200, vocab - 200), start.narrow(0, 200, vocab - 200)));
    // The same call again adds the same amounts: the run sums do not depend on scheduling.
    const auto once = table.grad().clone();
    table.mutable_grad() = start.clone();
    ASSERT_TRUE(mdl::add_rows_into_grad(table, rows, grad));
    EXPECT_TRUE(torch::equal(table.grad(), once));
  }
}

TEST_F(FusedOpsGpu, GradientsAddedIntoGradEqualAutogradsOnTheGpu) {
  for (const char* name : {"tiny-dense", "tiny-moe"}) test_support::expect_into_grad_matches_autograd(name, torch::kCUDA);
}

#ifdef TOPOTRAIN_CUDA
// While it lives, an operation that makes the host wait for the device throws.
class ThrowOnDeviceWait {
 public:
  ThrowOnDeviceWait() : before_(c10::cuda::warning_state().get_sync_debug_mode()) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  }
  ~ThrowOnDeviceWait() { c10::cuda::warning_state().set_sync_debug_mode(before_); }

 private:
  c10::cuda::SyncDebugMode before_;
};

// The LM loss finds its target rows from the packer's host count: on the GPU it enqueues
// without waiting for the device, and its loss is the CPU model's, where the count is
// checked against the mask.
TEST_F(FusedOpsGpu, LmLossOfAMaskedBatchEnqueuesWithoutWaitingForTheDevice) {
  const auto config = mdl::ModelConfig::preset("tiny-moe");
  torch::manual_seed(3);
  mdl::CausalLM on_cpu(config);
  torch::manual_seed(3);
  mdl::CausalLM on_gpu(config);
  on_gpu->to(torch::kCUDA);
  auto batch = topotrain::PackedBatch::from_documents({{5, 6, 7, 8, 9}, {10, 11}, {12, 13, 14, 15, 16, 17, 18}});
  batch.loss_mask = (torch::arange(batch.num_tokens()) % 3 != 0).to(torch::kUInt8);
  batch.summarize();
  const auto hidden = torch::randn({batch.num_tokens(), config.hidden_size});
  const auto expected = mdl::lm_loss(*on_cpu, hidden, batch).loss_sum;
  const auto batch_on_gpu = batch.to(torch::kCUDA);
  const auto hidden_on_gpu = hidden.to(torch::kCUDA);
  on_gpu->lm_head_compute_values(torch::kFloat32);  // made once, outside the checked region
  torch::cuda::synchronize();
  torch::Tensor loss;
  {
    ThrowOnDeviceWait strict;
    EXPECT_THROW(batch_on_gpu.loss_mask.nonzero(), c10::Error);  // the check itself works
    loss = mdl::lm_loss(*on_gpu, hidden_on_gpu, batch_on_gpu).loss_sum;
  }
  EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-3 * std::abs(expected.item<double>()));
}
#endif
