// The cached target forward against the model's full-sequence forward_backbone: hidden states,
// tap states and logits of a prefix and several chunks, dense and MoE, and after a crop.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tiny_models.h"
#include "topotrain/infer/cached_target.h"

namespace inf = topotrain::infer;
namespace ts = topotrain::test_support;
using topotrain::PackedBatch;

namespace {

class CachedTargetTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    torch::manual_seed(11);
  }
};

struct Full {
  torch::Tensor hidden, taps, logits;
};

Full full_forward(topotrain::model::CausalLMImpl& target, const std::vector<int64_t>& sequence,
                  const std::vector<int64_t>& taps) {
  const auto out = target.forward_backbone(PackedBatch::from_documents({sequence}), taps);
  const auto rows = torch::arange(static_cast<int64_t>(sequence.size()), torch::kInt64);
  return {out.hidden, torch::cat(out.taps, 1), target.logits_at(out.hidden, rows)};
}

// Runs `chunks` of `sequence` in order through `cached` and concatenates what comes out.
Full cached_forward(topotrain::model::CausalLMImpl& target, inf::CachedTarget& cached,
                    const std::vector<int64_t>& sequence, int64_t first, const std::vector<int64_t>& chunks) {
  std::vector<torch::Tensor> hidden, taps;
  int64_t at = first;
  for (int64_t n : chunks) {
    const auto step = cached.forward(torch::tensor(std::vector<int64_t>(sequence.begin() + at,
                                                                        sequence.begin() + at + n), torch::kInt64));
    hidden.push_back(step.hidden);
    taps.push_back(step.taps);
    at += n;
  }
  auto h = torch::cat(hidden);
  auto rows = torch::arange(h.size(0), torch::kInt64);
  return {h, torch::cat(taps), target.logits_at(h, rows)};
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const char* what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-5)) << what << ": max difference " << (a - b).abs().max().item<double>();
}

}  // namespace

TEST_P(CachedTargetTest, PrefixAndChunksEqualTheFullForward) {
  auto pair = ts::tiny_pair(/*moe=*/GetParam());
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> taps{1, 5, 7};
  const auto sequence = ts::random_tokens(17, 64);
  const Full full = full_forward(*pair.target, sequence, taps);

  inf::CachedTarget cached(*pair.target, taps);
  const Full got = cached_forward(*pair.target, cached, sequence, 0, {6, 1, 4, 1, 5});
  EXPECT_EQ(cached.length(), 17);
  expect_close(got.hidden, full.hidden, "hidden");
  expect_close(got.taps, full.taps, "taps");
  expect_close(got.logits, full.logits, "logits");
}

TEST_P(CachedTargetTest, ACroppedTailIsForgottenAndOverwritten) {
  auto pair = ts::tiny_pair(/*moe=*/GetParam());
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> taps{2, 3};
  auto sequence = ts::random_tokens(14, 64);
  inf::CachedTarget cached(*pair.target, taps);
  cached_forward(*pair.target, cached, sequence, 0, {5, 4, 4});
  cached.crop(7);
  EXPECT_EQ(cached.length(), 7);
  // Positions 7.. now hold other tokens than the ones cropped away.
  for (size_t i = 7; i < sequence.size(); ++i) sequence[i] = (sequence[i] + 17) % 64;
  const Full got = cached_forward(*pair.target, cached, sequence, 7, {4, 3});
  const Full full = full_forward(*pair.target, sequence, taps);
  expect_close(got.hidden, full.hidden.narrow(0, 7, 7), "hidden after crop");
  expect_close(got.taps, full.taps.narrow(0, 7, 7), "taps after crop");
  expect_close(got.logits, full.logits.narrow(0, 7, 7), "logits after crop");

  // A new sequence after clear() starts at position 0 again.
  cached.clear();
  const Full again = cached_forward(*pair.target, cached, sequence, 0, {14});
  expect_close(again.hidden, full.hidden, "hidden after clear");
}

INSTANTIATE_TEST_SUITE_P(DenseAndMoe, CachedTargetTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "moe" : "dense"; });
