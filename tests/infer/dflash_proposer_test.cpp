// The drafter's incremental proposal against training's forward_blocks: a block anchored at row
// `start` of a sequence, with the target's tap states of the rows before it, must give the same
// hidden states and proposals whether its context was cached step by step (as decoding fills
// it) or computed for the whole sequence at once (as training does).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tiny_models.h"
#include "topotrain/infer/dflash_proposer.h"
#include "topotrain/model/rms_norm.h"

namespace inf = topotrain::infer;
namespace mdl = topotrain::model;
namespace ts = topotrain::test_support;
using topotrain::PackedBatch;

TEST(DFlashProposerTest, ProposalEqualsForwardBlocksAtTheSameAnchor) {
  at::set_num_threads(1);
  torch::manual_seed(3);
  auto pair = ts::tiny_pair(/*moe=*/false, /*block_size=*/5);
  torch::NoGradGuard no_grad;
  const auto& c = pair.drafter->config();
  const int64_t T = 24, B = c.block_size;
  const auto sequence = ts::random_tokens(T, 60);

  mdl::DFlashBatch batch;
  batch.packed = PackedBatch::from_documents({sequence});
  batch.taps = torch::cat(pair.target->forward_backbone(batch.packed, pair.drafter->taps()).taps, 1);

  // The loop's pattern: the prompt's rows at once, then after each verification the rows of
  // the accepted block positions (1 to B at a time).
  inf::DFlashProposer proposer(*pair.drafter);
  proposer.reset();
  int64_t start = 7;
  proposer.extend_context(batch.taps.narrow(0, 0, start));
  int64_t checked = 0;
  for (int64_t step : {3, 1, 5, 2, 4}) {
    ASSERT_EQ(proposer.context_length(), start);
    const auto blocks = mdl::blocks_at(batch.packed.cu_seqlens, batch.packed.loss_mask, B, {start});
    const auto expected_hidden = pair.drafter->forward_blocks(batch, blocks);
    const auto hidden = proposer.block_hidden(sequence[start]);
    EXPECT_TRUE(torch::allclose(hidden, expected_hidden, 1e-4, 1e-5))
        << "anchor " << start << ": max difference " << (hidden - expected_hidden).abs().max().item<double>();

    const auto normed = mdl::rms_norm(expected_hidden.narrow(0, 1, B - 1), pair.drafter->target_norm,
                                      c.target.rms_norm_eps);
    const auto expected = torch::matmul(normed, pair.drafter->target_lm_head.t()).argmax(-1);
    EXPECT_TRUE(torch::equal(proposer.propose(sequence[start]), expected)) << "anchor " << start;

    proposer.extend_context(batch.taps.narrow(0, start, step));
    start += step;
    ++checked;
  }
  EXPECT_EQ(checked, 5);
  // reset() forgets the context: the next sequence starts at position 0.
  proposer.reset();
  EXPECT_EQ(proposer.context_length(), 0);
}
