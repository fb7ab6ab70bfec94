// A packed batch as the packer makes it reaches the drafter's end of the hidden-state link
// (MPI transport) unchanged: every field of kPackedBatchFields bit-exact and in its dtype,
// the loss mask and sample ids included, and the receiver's summarized host fields equal to
// the packer's. The receiver checks against its own packer and, independently, against the
// dataset's tokens and loss mask read at each token's sample and position.
#include <gtest/gtest.h>

#include <mpi.h>

#include "topotrain/batch/packed_batch.h"
#include "topotrain/comm/hidden_state_link.h"
#include "topotrain/data/token_budget_packer.h"

namespace topotrain {
namespace {

// Sample d has 2 + (5 * d) % 11 tokens 100 * d + i, with a loss mask that is neither all
// ones nor all zeros in any long sample.
std::shared_ptr<const data::TokenDataset> masked_dataset() {
  data::TokenDatasetContents c;
  c.vocab_size = 4000;
  c.eos_id = 0;
  for (std::uint32_t d = 0; d < 30; ++d) {
    for (std::uint32_t i = 0; i < 2 + (5 * d) % 11; ++i) {
      c.tokens.push_back(100 * d + i);
      c.loss_mask.push_back((i + d) % 3 != 0);
    }
    c.offsets.push_back(c.tokens.size());
  }
  return std::make_shared<const data::TokenDataset>(data::TokenDataset::from_contents(std::move(c), "test"));
}

// One epoch in a shuffled order, split at a budget smaller than the longest samples (so
// later pieces start at non-zero positions).
data::TokenBudgetPacker packer_of(std::shared_ptr<const data::TokenDataset> dataset) {
  data::PackerConfig config;
  config.token_budget = 9;
  config.end_epoch = 1;
  return data::TokenBudgetPacker(std::move(dataset), config, data::DataPosition{});
}

TEST(PackedBatchLink, EveryFieldThePackerSetsArrivesUnchanged) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_EQ(size, 2) << "one target and one drafter";
  at::set_num_threads(1);
  const auto dataset = masked_dataset();
  data::TokenBudgetPacker packer = packer_of(dataset);
  comm::LinkConfig config;
  config.transport = LinkTransport::mpi;
  config.queue_depth = 4;
  config.device = Device::cpu();
  const comm::LinkEnds ends{1, {0}};
  if (rank == 0) {
    comm::HiddenStateSender sender(MPI_COMM_WORLD, ends, config);
    for (PackedBatch batch = packer.next(); batch.num_tokens() > 0; batch = packer.next()) {
      comm::PackedHiddenBatch out;
      out.packed = batch;
      out.hidden = at::arange(batch.num_tokens() * 2, at::kFloat).reshape({batch.num_tokens(), 2});
      sender.send(out);
    }
    sender.close();
    return;
  }
  comm::HiddenStateReceiver receiver(MPI_COMM_WORLD, ends, config);
  const data::TokenDatasetContents& contents = dataset->contents();
  std::int64_t batches = 0, masked_out = 0, continued = 0;
  while (auto in = receiver.next()) {
    const PackedBatch want = packer.next();
    const PackedBatch& got = in->packed;
    for (const PackedBatchField& field : kPackedBatchFields) {
      const at::Tensor& g = got.*field.member;
      ASSERT_TRUE(g.defined()) << field.name;
      EXPECT_EQ(g.scalar_type(), field.dtype) << field.name;
      EXPECT_TRUE(at::equal(g, want.*field.member)) << field.name << " of batch " << batches;
    }
    EXPECT_EQ(got.sequence_lengths, want.sequence_lengths);
    EXPECT_EQ(got.max_seqlen, want.max_seqlen);
    EXPECT_EQ(got.num_loss_targets, want.num_loss_targets);
    EXPECT_NO_THROW(got.check());
    // Each token is the dataset's at its sample and position, loss mask included.
    const auto cu = got.cu_seqlens.accessor<std::int32_t, 1>();
    for (std::int64_t s = 0; s < got.num_sequences(); ++s) {
      const std::uint64_t sample = static_cast<std::uint64_t>(got.sample_ids[s].item<std::int64_t>());
      for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) {
        const std::uint64_t at = contents.offsets[sample] + static_cast<std::uint64_t>(got.positions[t].item<std::int64_t>());
        ASSERT_EQ(got.tokens[t].item<std::int64_t>(), contents.tokens[at]);
        ASSERT_EQ(got.loss_mask[t].item<std::int64_t>(), contents.loss_mask[at]);
        masked_out += contents.loss_mask[at] == 0;
      }
      continued += got.positions[cu[s]].item<std::int64_t>() > 0;
    }
    ++batches;
  }
  EXPECT_EQ(packer.next().num_tokens(), 0) << "every batch arrived";
  EXPECT_GT(batches, 10);
  EXPECT_GT(masked_out, 0) << "the loss mask has zeros to lose";
  EXPECT_GT(continued, 0) << "some pieces continue a split sample";
}

}  // namespace
}  // namespace topotrain
