#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <set>

#include "topotrain/train/stream_cursor.h"

using namespace topotrain;

namespace {

StreamCursor cursor(std::uint64_t stream, std::uint64_t epoch, std::uint64_t consumed, std::uint64_t offset) {
  return {stream, {12345, epoch, consumed, offset}};
}

}  // namespace

TEST(StreamCursor, RoundTripsThroughTheBatchTensor) {
  // Large words too: a position is unsigned, the tensor int64.
  for (const StreamCursor& c : {cursor(0, 0, 0, 0), cursor(3, 2, 17, 5), cursor(1, ~0ull >> 1, 1ull << 40, 7)}) {
    const StreamCursor back = decode_cursor(encode_cursor(c));
    EXPECT_EQ(back.stream, c.stream);
    EXPECT_EQ(back.after, c.after);
  }
}

TEST(StreamCursor, ABatchWithoutACursorIsRejected) {
  EXPECT_THROW(decode_cursor(at::Tensor()), std::runtime_error);
  EXPECT_THROW(decode_cursor(at::zeros({3}, at::kLong)), std::runtime_error);
}

// Anchors must differ between batches (else every batch trains the same blocks) and stay
// those of the batch.
TEST(StreamCursor, AnchorSeedsDependOnTheRunSeedTheStreamAndThePosition) {
  std::set<std::uint64_t> seeds;
  for (std::uint64_t stream : {0, 1})
    for (std::uint64_t consumed : {0, 1, 2})
      for (std::uint64_t offset : {0, 9}) seeds.insert(anchor_seed(42, cursor(stream, 0, consumed, offset)));
  EXPECT_EQ(seeds.size(), 12u);
  EXPECT_NE(anchor_seed(42, cursor(0, 0, 1, 0)), anchor_seed(43, cursor(0, 0, 1, 0)));
  EXPECT_NE(anchor_seed(42, cursor(0, 0, 1, 0)), anchor_seed(42, cursor(0, 1, 1, 0)));
  // Pinned (computed apart from this code): a run resumed by another build draws the anchors
  // its checkpoint's batches would have had.
  EXPECT_EQ(anchor_seed(42, cursor(1, 0, 2, 9)), 0xedd077e57874ff93ull);
}

// A held-out batch's anchors: the same at every pass, different per stream and batch, and
// none of a training batch's at any position of the first epochs.
TEST(StreamCursor, HeldOutAnchorSeedsAreFixedPerBatchAndApartFromTraining) {
  std::set<std::uint64_t> held_out, training;
  for (std::uint64_t stream : {0, 1, 2})
    for (std::uint64_t batch = 0; batch < 50; ++batch) held_out.insert(held_out_anchor_seed(42, stream, batch));
  EXPECT_EQ(held_out.size(), 150u);
  EXPECT_EQ(held_out_anchor_seed(42, 1, 7), held_out_anchor_seed(42, 1, 7));
  EXPECT_NE(held_out_anchor_seed(42, 1, 7), held_out_anchor_seed(43, 1, 7));
  for (std::uint64_t stream : {0, 1, 2})
    for (std::uint64_t epoch : {0, 1, 2})
      for (std::uint64_t consumed = 0; consumed < 50; ++consumed)
        EXPECT_EQ(held_out.count(anchor_seed(42, cursor(stream, epoch, consumed, 0))), 0u);
}
