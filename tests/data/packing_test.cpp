// The packer's cutting rule, worked out by hand on a five-sample dataset, and the epoch
// permutation.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "topotrain/core/error.h"
#include "topotrain/data/sample_order.h"
#include "topotrain/data/token_budget_packer.h"

namespace topotrain::data {
namespace {

using I64 = std::vector<int64_t>;

// Sample d has length lengths[d] and tokens 10*d + 0, 10*d + 1, ... (vocab 1000).
std::shared_ptr<const TokenDataset> dataset_of(const std::vector<uint64_t>& lengths, bool with_mask) {
  TokenDatasetContents c;
  c.vocab_size = 1000;
  c.eos_id = 0;
  for (uint64_t d = 0; d < lengths.size(); ++d) {
    for (uint64_t i = 0; i < lengths[d]; ++i) {
      c.tokens.push_back(static_cast<uint32_t>(10 * d + i));
      if (with_mask) c.loss_mask.push_back(i % 2);
    }
    c.offsets.push_back(c.tokens.size());
  }
  return std::make_shared<const TokenDataset>(TokenDataset::from_contents(std::move(c), "test"));
}

I64 vec(const torch::Tensor& t) {
  const torch::Tensor l = t.to(torch::kInt64).contiguous();
  return I64(l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel());
}

class PackerTest : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
  // lengths 3 5 2 9 1, file order, budget 6.
  std::shared_ptr<const TokenDataset> data_ = dataset_of({3, 5, 2, 9, 1}, false);
  PackerConfig config(LongSamplePolicy policy) { return PackerConfig{6, policy, false, false, {}}; }
};

TEST_F(PackerTest, SplitRuleByHand) {
  TokenBudgetPacker packer(data_, config(LongSamplePolicy::split), DataPosition{});
  // s0 fits; s1 would overflow a non-empty batch -> ends it.
  PackedBatch b = packer.next();
  EXPECT_EQ(vec(b.tokens), (I64{0, 1, 2}));
  EXPECT_EQ(vec(b.cu_seqlens), (I64{0, 3}));
  EXPECT_EQ(b.num_tokens(), 3);
  b = packer.next();
  EXPECT_EQ(vec(b.sample_ids), (I64{1}));
  b = packer.next();
  EXPECT_EQ(vec(b.sample_ids), (I64{2}));
  // s3 (9 tokens) alone in an empty batch: first 6 tokens, the rest waits.
  b = packer.next();
  EXPECT_EQ(vec(b.tokens), (I64{30, 31, 32, 33, 34, 35}));
  EXPECT_EQ(vec(b.positions), (I64{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(packer.position(), (DataPosition{0, 0, 3, 6}));
  // The rest of s3 (positions continue at 6), then s4; s0 of epoch 1 (3) would overflow.
  b = packer.next();
  EXPECT_EQ(vec(b.tokens), (I64{36, 37, 38, 40}));
  EXPECT_EQ(vec(b.positions), (I64{6, 7, 8, 0}));
  EXPECT_EQ(vec(b.cu_seqlens), (I64{0, 3, 4}));
  EXPECT_EQ(vec(b.sample_ids), (I64{3, 4}));
  EXPECT_EQ(vec(b.loss_mask), (I64{1, 1, 1, 1}));
  EXPECT_EQ(packer.position(), (DataPosition{0, 1, 0, 0}));
}

TEST_F(PackerTest, TruncateDropsTheRestOfALongSample) {
  TokenBudgetPacker packer(data_, config(LongSamplePolicy::truncate), DataPosition{0, 0, 3, 0});
  PackedBatch b = packer.next();
  EXPECT_EQ(vec(b.tokens), (I64{30, 31, 32, 33, 34, 35}));
  EXPECT_EQ(packer.position(), (DataPosition{0, 0, 4, 0}));
  b = packer.next();  // s4 alone: s0 of epoch 1 (3) would fit in 6 - 1, but the epoch has ended
  EXPECT_EQ(vec(b.sample_ids), (I64{4}));
  EXPECT_EQ(packer.position(), (DataPosition{0, 1, 0, 0}));
}

TEST_F(PackerTest, LossMaskIsCopiedAndCounted) {
  TokenBudgetPacker packer(dataset_of({3, 5}, true), PackerConfig{8, LongSamplePolicy::split, false, false, {}},
                           DataPosition{});
  const MicroBatchLayout layout = packer.next_layout();
  EXPECT_EQ(layout.num_loss_targets, 1u + 2u);
  const PackedBatch b = packer.materialize(layout);
  EXPECT_EQ(vec(b.loss_mask), (I64{0, 1, 0, 0, 1, 0, 1, 0}));
  EXPECT_EQ(b.num_loss_targets, 3);
}

TEST_F(PackerTest, APieceFirstTokenIsNoLossTarget) {
  // Sample 0 (mask 0 1 0 1 0) split at a budget of 3: [0, 3) predicts tokens 1 and 2 (mask
  // 1, 0); [3, 5) starts on a masked-in token that nothing in it predicts, and predicts
  // token 4 (mask 0). Two tokens have mask 1, one is a target.
  TokenBudgetPacker packer(dataset_of({5}, true), PackerConfig{3, LongSamplePolicy::split, false, false, {}},
                           DataPosition{});
  const MicroBatchLayout first = packer.next_layout();
  const MicroBatchLayout rest = packer.next_layout();
  EXPECT_EQ(first.num_loss_targets, 1u);
  EXPECT_EQ(rest.num_loss_targets, 0u);
  EXPECT_EQ(vec(packer.materialize(rest).loss_mask), (I64{1, 0}));
  // Without a mask every token but a piece's first is a target.
  TokenBudgetPacker unmasked(dataset_of({5}, false), PackerConfig{3, LongSamplePolicy::split, false, false, {}},
                             DataPosition{});
  EXPECT_EQ(unmasked.next_layout().num_loss_targets, 2u);
  EXPECT_EQ(unmasked.next_layout().num_loss_targets, 1u);
}

TEST_F(PackerTest, PositionOutsideTheDatasetIsRefused) {
  EXPECT_THROW(TokenBudgetPacker(data_, config(LongSamplePolicy::split), DataPosition{0, 0, 5, 0}), ConfigError);
  EXPECT_THROW(TokenBudgetPacker(data_, config(LongSamplePolicy::split), DataPosition{0, 0, 0, 3}), ConfigError);
  EXPECT_THROW(TokenBudgetPacker(data_, PackerConfig{}, DataPosition{}), ConfigError);
}

// Three streams over 11 samples (each ~4 pieces long at budget 3): together they visit
// every sample once per epoch; each stream, interrupted anywhere and resumed with another
// token_budget, continues with exactly the tokens it had not produced.
TEST(PackerStreams, StreamsPartitionEachEpochAndResumeOnTheirOwn) {
  auto data = dataset_of({4, 1, 7, 3, 2, 5, 4, 1, 6, 2, 3}, false);
  const uint64_t samples = 11, streams = 3;
  for (uint64_t s = 0; s < streams; ++s) {
    PackerConfig config{3, LongSamplePolicy::split, true, false, SampleStream{s, streams}};
    DataPosition start{5, 0, 0, 0};
    // Uninterrupted: the stream's tokens until its epoch 0 ends.
    TokenBudgetPacker whole(data, config, start);
    std::vector<int64_t> expected;
    while (whole.position().epoch == 0) {
      const I64 t = vec(whole.next().tokens);
      expected.insert(expected.end(), t.begin(), t.end());
    }
    // Interrupted after two batches, resumed at budget 5.
    TokenBudgetPacker first(data, config, start);
    std::vector<int64_t> got;
    for (int i = 0; i < 2; ++i) {
      const I64 t = vec(first.next().tokens);
      got.insert(got.end(), t.begin(), t.end());
    }
    PackerConfig resumed_config = config;
    resumed_config.token_budget = 5;
    TokenBudgetPacker resumed(data, resumed_config, first.position());
    while (resumed.position().epoch == 0) {
      const I64 t = vec(resumed.next().tokens);
      got.insert(got.end(), t.begin(), t.end());
    }
    // The resumed run's last batch may reach into epoch 1; compare the epoch-0 prefix.
    ASSERT_GE(got.size(), expected.size()) << "stream " << s;
    got.resize(expected.size());
    EXPECT_EQ(got, expected) << "stream " << s;
  }
  // Budget 1 with truncate: one batch per sample, so an epoch's batches name its samples.
  std::set<int64_t> seen;
  for (uint64_t s = 0; s < streams; ++s) {
    TokenBudgetPacker packer(data, PackerConfig{1, LongSamplePolicy::truncate, true, false, SampleStream{s, streams}},
                             DataPosition{5, 0, 0, 0});
    while (packer.position().epoch == 0) {
      const int64_t sample = vec(packer.next().sample_ids).at(0);
      EXPECT_TRUE(seen.insert(sample).second) << "sample " << sample << " in two streams";
    }
  }
  EXPECT_EQ(seen.size(), samples);
  EXPECT_THROW(TokenBudgetPacker(data, PackerConfig{3, LongSamplePolicy::split, true, false, SampleStream{3, 3}},
                                 DataPosition{}),
               ConfigError);
  EXPECT_THROW(TokenBudgetPacker(data, PackerConfig{3, LongSamplePolicy::split, true, false, SampleStream{0, 12}},
                                 DataPosition{}),
               ConfigError);
}

// An epoch's last micro-batch is short rather than filled from the next epoch's order,
// whatever the budget: a budget larger than the dataset holds one pass, not several.
TEST_F(PackerTest, MicroBatchesEndAtTheEpochBoundary) {
  TokenBudgetPacker packer(dataset_of({3, 5, 2, 9, 1}, true), PackerConfig{16, LongSamplePolicy::split, false, false, {}},
                           DataPosition{});
  const PackedBatch first = packer.next();  // s0, s1, s2 (10 tokens); s3 would overflow
  EXPECT_EQ(vec(first.sample_ids), (I64{0, 1, 2}));
  // The lengths also travel on the host, for attention to plan by without reading the GPU.
  EXPECT_EQ(first.sequence_lengths, (I64{3, 5, 2}));
  const PackedBatch last = packer.next();  // s3, s4 (10 tokens): s0 of epoch 1 would fit, but is not taken
  EXPECT_EQ(vec(last.sample_ids), (I64{3, 4}));
  EXPECT_EQ(last.num_tokens(), 10);
  EXPECT_EQ(packer.position(), (DataPosition{0, 1, 0, 0}));

  TokenBudgetPacker huge(dataset_of({3, 5, 2, 9, 1}, false),
                         PackerConfig{10000, LongSamplePolicy::split, true, false, {}}, DataPosition{});
  for (uint64_t epoch = 1; epoch <= 3; ++epoch) {
    const PackedBatch pass = huge.next();
    std::vector<int64_t> ids = vec(pass.sample_ids);
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(ids, (I64{0, 1, 2, 3, 4})) << "each micro-batch holds one pass over the data";
    EXPECT_EQ(pass.num_tokens(), 20);
    EXPECT_EQ(huge.position(), (DataPosition{0, epoch, 0, 0}));
  }
}

// From end_epoch on the stream has ended: empty layouts, the position stays at the end.
TEST_F(PackerTest, StreamEndsAtEndEpoch) {
  PackerConfig config{8, LongSamplePolicy::split, true, false, {}};
  config.end_epoch = 2;
  TokenBudgetPacker packer(data_, config, DataPosition{});
  uint64_t tokens = 0;
  int batches = 0;
  while (!packer.ended()) {
    tokens += packer.next().num_tokens();
    ASSERT_LT(++batches, 100) << "the stream never ended";
  }
  EXPECT_EQ(tokens, 2u * 20u);
  EXPECT_EQ(packer.position(), (DataPosition{0, 2, 0, 0}));
  const PackedBatch after = packer.next();
  EXPECT_EQ(after.num_tokens(), 0);
  EXPECT_EQ(after.num_sequences(), 0);
  EXPECT_EQ(packer.position(), (DataPosition{0, 2, 0, 0}));
}

// Attention's FLOPs go by sum(piece^2) / sum(piece) over the pieces the packer cuts.
TEST(MeanAttentionContext, SumsSquaredPiecesAsThePackerCutsThem) {
  const auto data = dataset_of({3, 5, 10}, false);
  // split at 4: 3 | 4, 1 | 4, 4, 2
  EXPECT_DOUBLE_EQ(mean_attention_context(*data, 4, LongSamplePolicy::split), (9.0 + 16 + 1 + 16 + 16 + 4) / 18);
  // truncate at 4: 3 | 4 | 4
  EXPECT_DOUBLE_EQ(mean_attention_context(*data, 4, LongSamplePolicy::truncate), (9.0 + 16 + 16) / 11);
  // Within the budget: above the mean length (6) whenever lengths differ, equal to it when they do not.
  EXPECT_DOUBLE_EQ(mean_attention_context(*data, 100, LongSamplePolicy::split), (9.0 + 25 + 100) / 18);
  EXPECT_DOUBLE_EQ(mean_attention_context(*dataset_of({6, 6}, false), 100, LongSamplePolicy::split), 6.0);
}

TEST(EpochPermutation, DeterministicPermutationThatDependsOnSeedAndEpoch) {
  const auto a = epoch_permutation(7, 0, 1000, true);
  EXPECT_EQ(a, epoch_permutation(7, 0, 1000, true));
  EXPECT_NE(a, epoch_permutation(8, 0, 1000, true));
  EXPECT_NE(a, epoch_permutation(7, 1, 1000, true));
  std::vector<uint64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(a, identity);
  EXPECT_EQ(epoch_permutation(7, 3, 1000, false), identity);
  // Pinned values: the order must never change between builds, or resumed runs would
  // see other samples than the checkpoint promised.
  EXPECT_EQ(epoch_permutation(1, 0, 8, true), (std::vector<uint64_t>{4, 1, 7, 5, 3, 0, 6, 2}));
  EXPECT_EQ(epoch_permutation(1, 1, 8, true), (std::vector<uint64_t>{0, 2, 7, 5, 4, 6, 3, 1}));
}

}  // namespace
}  // namespace topotrain::data
