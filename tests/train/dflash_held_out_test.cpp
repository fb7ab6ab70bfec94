// dflash_train's held-out draft quality (dflash_held_out.h) on 1 and 3 ranks: the counts
// every drafter agrees on equal those of one rank over every batch computed independently
// (dense logits of every block slot, argmax against the data's token, the weighted loss by
// its definition), tau follows from them by 1 + sum_k prod_{i<=k} acc_i, and evaluating
// leaves the parameters' gradients and the global random generator as they were.
#include <mpi.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "topotrain/model/dflash_drafter.h"
#include "topotrain/train/dflash_held_out.h"
#include "../tiny_dflash_config.h"

namespace mdl = topotrain::model;
using topotrain::HeldOutDraftQuality;
using topotrain::HeldOutDraftSums;
using topotrain::PackedBatch;

namespace {

// A vocabulary of 16, so that some drafts of an untrained drafter are right.
mdl::DFlashConfig tiny_config() {
  mdl::DFlashConfig c = topotrain::test_support::tiny_dflash_config();
  c.target.vocab_size = 16, c.mask_token_id = 15;
  c.num_draft_layers = 1, c.max_anchors = 6;
  return c;
}

// Batch i: two documents of a repeating pattern (a small vocabulary, so that some drafts
// are right even untrained), its loss mask off at one row, and taps drawn from seed i.
mdl::DFlashBatch batch_of(const mdl::DFlashConfig& c, int i) {
  std::vector<std::vector<int64_t>> docs(2);
  for (int64_t t = 0; t < 9 + i; ++t) docs[0].push_back((t * (i + 1)) % 4);
  for (int64_t t = 0; t < 7; ++t) docs[1].push_back((3 * t + i) % 5);
  mdl::DFlashBatch b;
  b.packed = PackedBatch::from_documents(docs);
  const int64_t rows = b.packed.tokens.size(0);
  b.packed.loss_mask = torch::ones({rows}, torch::kUInt8);
  b.packed.loss_mask[3] = 0;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(100 + i);
  b.taps = at::randn({rows, static_cast<int64_t>(c.resolved_taps().size()) * c.target.hidden_size}, generator);
  return b;
}

mdl::DFlashBlocks blocks_of(const mdl::DFlashConfig& c, const mdl::DFlashBatch& b, int i) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7 + i);
  return mdl::sample_anchors(b.packed.cu_seqlens, b.packed.loss_mask, c.block_size, c.max_anchors, generator);
}

// The statistics of one batch from dense logits of every block slot.
// The labels of every scored slot, per slot: what the trivial drafters choose from.
using SlotLabels = std::vector<std::map<int64_t, int64_t>>;

void add_reference(mdl::DFlashDrafterImpl& d, const mdl::DFlashBatch& batch, const mdl::DFlashBlocks& blocks,
                   HeldOutDraftQuality& r, SlotLabels& labels) {
  torch::NoGradGuard no_grad;
  const auto& c = d.config();
  auto normed = mdl::rms_norm(d.forward_blocks(batch, blocks), d.target_norm, c.target.rms_norm_eps);
  auto log_probs = torch::log_softmax(torch::matmul(normed, d.target_lm_head.t()), -1);
  const int64_t B = c.block_size;
  const at::Tensor bounds = batch.packed.cu_seqlens.to(torch::kLong);
  for (int64_t i = 0; i < blocks.num_blocks(); ++i)
    for (int64_t k = 1; k < B; ++k) {
      const int64_t a = blocks.anchor_rows[i];
      int64_t end = 0;  // the end of the anchor's document
      for (int64_t d = 1; d < bounds.size(0) && end <= a; ++d) end = bounds[d].item<int64_t>();
      if (a + k >= end || batch.packed.loss_mask[a + k].item<int64_t>() == 0) continue;  // outside or unscored
      const int64_t label = batch.packed.tokens[a + k].item<int64_t>();
      const double w = std::exp(-(k - 1) / c.gamma);
      auto row = log_probs[i * B + k];
      r.loss_sum -= w * row[label].item<double>();
      r.weight += w;
      r.draft.valid[k] += 1;
      r.draft.correct[k] += row.argmax().item<int64_t>() == label;
      labels[k][label] += 1;
    }
  r.anchors += blocks.num_blocks();
}

}  // namespace

TEST(HeldOutDraftSums, AgreedCountsEqualAnIndependentComputationOverEveryBatch) {
  at::set_num_threads(1);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  torch::manual_seed(5);
  const mdl::DFlashConfig config = tiny_config();
  mdl::DFlashDrafter drafter(config);  // the same weights on every rank
  constexpr int kBatches = 5;

  torch::manual_seed(11);  // the global generator's next draws, which evaluating must leave alone
  const at::Tensor expected_next = torch::rand({4});
  torch::manual_seed(11);
  HeldOutDraftSums sums(config.block_size, config.target.vocab_size);
  for (int i = rank; i < kBatches; i += world) {
    const mdl::DFlashBatch batch = batch_of(config, i);
    sums.add(*drafter, batch, blocks_of(config, batch, i));
  }
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected_next)) << "evaluating drew from the global generator";
  for (const auto& p : drafter->parameters()) EXPECT_FALSE(p.grad().defined()) << "evaluating formed a gradient";
  const HeldOutDraftQuality agreed = sums.agree(MPI_COMM_WORLD);

  const std::size_t B = static_cast<std::size_t>(config.block_size);
  HeldOutDraftQuality reference;
  for (auto* counts : {&reference.draft.correct, &reference.draft.valid, &reference.draft.mode_correct,
                       &reference.draft.slot_mode_correct})
    counts->assign(B, 0);
  std::int64_t tokens = 0;
  for (int r = 0; r < world; ++r) {
    // The trivial drafters of each rank choose on that rank's own held-out slots.
    SlotLabels labels(B);
    for (int i = r; i < kBatches; i += world) {
      const mdl::DFlashBatch batch = batch_of(config, i);
      add_reference(*drafter, batch, blocks_of(config, batch, i), reference, labels);
      tokens += batch.taps.size(0);
    }
    std::map<int64_t, int64_t> all;
    for (const auto& slot : labels)
      for (const auto& [label, n] : slot) all[label] += n;
    int64_t mode = -1, most = 0;
    for (const auto& [label, n] : all)
      if (n > most) mode = label, most = n;
    for (std::size_t k = 0; k < B; ++k) {
      int64_t best = 0;
      for (const auto& [label, n] : labels[k]) best = std::max(best, n);
      reference.draft.slot_mode_correct[k] += best;
      if (labels[k].count(mode)) reference.draft.mode_correct[k] += labels[k].at(mode);
    }
  }
  EXPECT_EQ(agreed.draft.correct, reference.draft.correct);
  EXPECT_EQ(agreed.draft.valid, reference.draft.valid);
  EXPECT_EQ(agreed.draft.mode_correct, reference.draft.mode_correct);
  EXPECT_EQ(agreed.draft.slot_mode_correct, reference.draft.slot_mode_correct);
  EXPECT_EQ(agreed.batches, kBatches);
  EXPECT_EQ(agreed.anchors, reference.anchors);
  EXPECT_EQ(agreed.tokens, tokens);
  EXPECT_NEAR(agreed.weight, reference.weight, 1e-9);
  EXPECT_NEAR(agreed.loss_sum, reference.loss_sum, 1e-4 * std::abs(reference.loss_sum));
  EXPECT_NEAR(agreed.loss(), reference.loss_sum / reference.weight, 1e-4);
  // Some drafts right and some wrong, so that tau tests more than its bounds.
  std::int64_t correct = 0, valid = 0;
  for (int k = 1; k < config.block_size; ++k) correct += agreed.draft.correct[k], valid += agreed.draft.valid[k];
  EXPECT_GT(correct, 0);
  EXPECT_LT(correct, valid);
  double tau = 1, prefix = 1;
  for (int k = 1; k < config.block_size; ++k) {
    const double acc = static_cast<double>(reference.draft.correct[k]) / static_cast<double>(reference.draft.valid[k]);
    EXPECT_DOUBLE_EQ(agreed.draft.accuracy()[k - 1], acc);
    prefix *= acc;
    tau += prefix;
  }
  EXPECT_DOUBLE_EQ(agreed.draft.tau(), tau);
}
