// Decoding on a GPU: the cached target forward and the drafter's proposal against the
// full-sequence forwards (flash or cuDNN prefill, masked-softmax cached steps, the drafter's
// SDPA path), and speculation against greedy decoding: exact in fp32, and in bf16 the prompts
// whose responses differ counted (a near tie may round either way).
//
// The MoE target is compared in fp32: in bf16 a token whose two best router logits nearly tie
// may be routed to another expert by one GEMM shape than by the other, and its output then
// differs wholly, which no tolerance describes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "tiny_models.h"
#include "topotrain/infer/dflash_proposer.h"
#include "topotrain/infer/speculative_decoding.h"

namespace inf = topotrain::infer;
namespace mdl = topotrain::model;
namespace ts = topotrain::test_support;
using topotrain::PackedBatch;

namespace {

const torch::Device kGpu(torch::kCUDA, 0);

// Largest difference relative to the reference's largest magnitude.
double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  const auto w = want.to(torch::kFloat32), g = got.to(torch::kFloat32);
  return (g - w).abs().max().item<double>() / w.abs().max().item<double>();
}

}  // namespace

TEST(InferGpu, CachedForwardAndProposalMatchTheFullForwards) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  for (bool moe : {false, true}) {
    torch::manual_seed(21);
    auto pair = ts::tiny_pair(moe, /*block_size=*/8);
    ts::place(pair, kGpu, moe ? torch::kFloat32 : torch::kBFloat16);
    const double tolerance = moe ? 1e-4 : 3e-2;
    torch::NoGradGuard no_grad;
    const auto sequence = ts::random_tokens(70, 60);
    mdl::DFlashBatch batch;
    batch.packed = PackedBatch::from_documents({sequence}).to(kGpu);
    const auto full = pair.target->forward_backbone(batch.packed, pair.drafter->taps());
    batch.taps = torch::cat(full.taps, 1);

    inf::CachedTarget cached(*pair.target, pair.drafter->taps());
    std::vector<torch::Tensor> hidden, taps;
    for (auto [first, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 40}, {40, 1}, {41, 8}, {49, 21}}) {
      const auto step = cached.forward(
          torch::tensor(std::vector<int64_t>(sequence.begin() + first, sequence.begin() + first + n)).to(kGpu));
      hidden.push_back(step.hidden);
      taps.push_back(step.taps);
    }
    EXPECT_LE(relative_error(torch::cat(hidden), full.hidden), tolerance) << (moe ? "moe" : "dense");
    EXPECT_LE(relative_error(torch::cat(taps), batch.taps), tolerance) << (moe ? "moe" : "dense");

    inf::DFlashProposer proposer(*pair.drafter);
    proposer.extend_context(batch.taps.narrow(0, 0, 30));
    for (int64_t step : {1, 8, 5}) {
      const int64_t start = proposer.context_length();
      const auto blocks = mdl::blocks_at(batch.packed.cu_seqlens.cpu(), torch::ones({70}, torch::kUInt8), 8, {start});
      EXPECT_LE(relative_error(proposer.block_hidden(sequence[start]), pair.drafter->forward_blocks(batch, blocks)),
                tolerance)
          << (moe ? "moe" : "dense") << ", anchor " << start;
      proposer.extend_context(batch.taps.narrow(0, start, step));
    }
  }
}

TEST(InferGpu, SpeculationIsExactInFp32AndCountedInBf16) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    torch::manual_seed(5);
    auto pair = ts::tiny_pair(/*moe=*/false, /*block_size=*/8);
    ts::place(pair, kGpu, dtype);
    torch::NoGradGuard no_grad;
    inf::CachedTarget plain(*pair.target, {}), tapped(*pair.target, pair.drafter->taps());
    inf::DFlashProposer proposer(*pair.drafter);
    inf::DecodeOptions options;
    options.max_new_tokens = 40;
    int64_t differing = 0, prompts = 0;
    for (int64_t length : {1, 5, 17, 33, 64, 100}) {
      const auto prompt = ts::random_tokens(length, 60);
      const auto greedy = inf::greedy_decode(plain, prompt, options);
      const auto speculative = inf::speculative_decode(tapped, proposer, prompt, options);
      ++prompts;
      differing += greedy.tokens != speculative.tokens;
      if (dtype == torch::kFloat32) {
        EXPECT_EQ(greedy.tokens, ts::reference_greedy(*pair.target, prompt, 40)) << "prompt of " << length;
        EXPECT_EQ(speculative.tokens, greedy.tokens) << "prompt of " << length;
      }
    }
    std::printf("%s: %lld of %lld speculative responses differ from greedy decoding\n",
                dtype == torch::kFloat32 ? "fp32" : "bf16", static_cast<long long>(differing),
                static_cast<long long>(prompts));
  }
}
