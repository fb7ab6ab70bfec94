// Anchor sampling, block validity, default taps, config checks and the acceptance length.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <set>

#include "topotrain/core/error.h"
#include "topotrain/model/dflash_anchors.h"
#include "topotrain/model/dflash_config.h"
#include "topotrain/model/dflash_metrics.h"

namespace mdl = topotrain::model;

namespace {

class DFlashAnchorsTest : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

// Three documents; loss mask 1 on odd rows of the first, all of the second (two tokens),
// none of the third.
struct Fixture {
  std::vector<int32_t> cu{0, 30, 32, 40};
  torch::Tensor cu_seqlens = torch::tensor(cu);
  torch::Tensor loss_mask = torch::zeros({40}, torch::kUInt8);
  Fixture() {
    for (int64_t r = 1; r < 30; r += 2) loss_mask[r] = 1;
    loss_mask[30] = 1, loss_mask[31] = 1;
  }
};

}  // namespace

TEST_F(DFlashAnchorsTest, AnchorsOnlyWhereLearnedAndFollowedAtMostMaxDeterministicAndResampled) {
  Fixture f;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  auto first = mdl::sample_anchors(f.cu_seqlens, f.loss_mask, 4, 5, gen);
  auto second = mdl::sample_anchors(f.cu_seqlens, f.loss_mask, 4, 5, gen);
  auto again_gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  auto again = mdl::sample_anchors(f.cu_seqlens, f.loss_mask, 4, 5, again_gen);

  EXPECT_EQ(first.anchor_rows, again.anchor_rows) << "same seed, same anchors";
  EXPECT_NE(first.anchor_rows, second.anchor_rows) << "the next step resamples";
  for (const auto* b : {&first, &second}) {
    // Document 0 has 14 eligible rows (odd rows 1..27; 29 is its last token): 5 drawn.
    // Document 1: row 30 only (31 is its last token). Document 2: no loss mask.
    ASSERT_EQ(b->document_blocks, (std::vector<int64_t>{0, 5, 6, 6}));
    for (int64_t i = 0; i < 5; ++i) {
      const int64_t a = b->anchor_rows[i];
      EXPECT_EQ(a % 2, 1);
      EXPECT_LT(a, 30);
      if (i > 0) {
        EXPECT_LT(b->anchor_rows[i - 1], a);
      }
      EXPECT_EQ(b->visible_context[i], a);
    }
    EXPECT_EQ(b->anchor_rows[5], 30);
    EXPECT_EQ(b->visible_context[5], 0);
  }
  // With a larger cap every eligible row is an anchor, in order.
  auto all = mdl::sample_anchors(f.cu_seqlens, f.loss_mask, 4, 100, gen);
  std::vector<int64_t> expected;
  for (int64_t r = 1; r < 29; r += 2) expected.push_back(r);
  expected.push_back(30);
  EXPECT_EQ(all.anchor_rows, expected);
  // Across many draws every eligible row of document 0 shows up (uniform over them).
  std::set<int64_t> seen;
  for (int step = 0; step < 50; ++step) {
    auto b = mdl::sample_anchors(f.cu_seqlens, f.loss_mask, 4, 5, gen);
    seen.insert(b.anchor_rows.begin(), b.anchor_rows.begin() + 5);
  }
  EXPECT_EQ(seen.size(), 14u);
}

TEST_F(DFlashAnchorsTest, SlotValidityStopsAtTheDocumentEndAndFollowsTheLossMask) {
  Fixture f;
  const auto b = mdl::blocks_at(f.cu_seqlens, f.loss_mask, 4, {26, 27, 30});
  const std::vector<uint8_t> expected{
      0, 1, 0, 1,  // anchor 26: labels 27 (mask 1), 28 (0), 29 (1)
      0, 0, 1, 0,  // anchor 27: labels 28 (0), 29 (1), 30 is the next document
      0, 1, 0, 0,  // anchor 30: label 31, then past its document's end
  };
  EXPECT_EQ(b.slot_valid, expected);
  EXPECT_EQ(b.num_valid_slots(), 4);
  EXPECT_THROW(mdl::blocks_at(f.cu_seqlens, f.loss_mask, 4, {29, 31}), std::invalid_argument)
      << "31 is the last token of its document";
  EXPECT_THROW(mdl::blocks_at(f.cu_seqlens, f.loss_mask, 4, {5, 3}), std::invalid_argument) << "not ascending";
}

TEST_F(DFlashAnchorsTest, DefaultTapsSpreadOverTheTarget) {
  EXPECT_EQ(mdl::default_taps(36, 5), (std::vector<int64_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(mdl::default_taps(28, 5), (std::vector<int64_t>{1, 7, 13, 19, 25}));
  // 1 + i * 2.5: 3.5 and 6.0 round half to even as Python's round does.
  EXPECT_EQ(mdl::default_taps(9, 3), (std::vector<int64_t>{1, 4, 6}));
  EXPECT_EQ(mdl::default_taps(36, 1), (std::vector<int64_t>{18}));
}

TEST_F(DFlashAnchorsTest, ConfigRejectsWhatCannotWork) {
  mdl::DFlashConfig c;
  c.target = mdl::ModelConfig::preset("tiny-dense");
  c.mask_token_id = 3;
  EXPECT_THROW(c.validate(), topotrain::ConfigError) << "3 target layers: too few for default taps";
  c.taps = {0, 2};
  EXPECT_NO_THROW(c.validate());
  auto bad = c;
  bad.mask_token_id = -1;
  EXPECT_THROW(bad.validate(), topotrain::ConfigError);
  bad = c, bad.taps = {0, 3};
  EXPECT_THROW(bad.validate(), topotrain::ConfigError);
  bad = c, bad.block_size = 1;
  EXPECT_THROW(bad.validate(), topotrain::ConfigError);
  EXPECT_THROW(mdl::parse_dflash_loss("mse", "train.loss"), topotrain::ConfigError);
  EXPECT_EQ(mdl::parse_dflash_loss("kl", "train.loss"), mdl::DFlashLoss::kl);
}

TEST_F(DFlashAnchorsTest, AcceptanceLengthOfAHandComputedAccuracyVector) {
  // slots 1..3: 8/10, 5/10, 1/4 -> tau = 1 + 0.8 + 0.8*0.5 + 0.8*0.5*0.25 = 2.3
  const auto acc = mdl::slot_accuracy({0, 8, 5, 1}, {0, 10, 10, 4});
  ASSERT_EQ(acc.size(), 3u);
  EXPECT_DOUBLE_EQ(acc[0], 0.8);
  EXPECT_DOUBLE_EQ(mdl::acceptance_length(acc), 2.3);
  EXPECT_DOUBLE_EQ(mdl::acceptance_length({0.0, 1.0}), 1.0);
  EXPECT_DOUBLE_EQ(mdl::slot_accuracy({0, 3, 0}, {0, 3, 0})[1], 0.0) << "no valid slot counts as 0";
}
