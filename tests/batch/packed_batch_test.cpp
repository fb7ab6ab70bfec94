// The packed-batch type: its field table lists every tensor member (so whatever walks the
// table, the hidden-state link's frames among them, covers the whole batch), summarize()
// derives the host fields as worked out by hand, to() moves every field, check() refuses
// what breaks the contract.
#include <gtest/gtest.h>

#include <cstddef>
#include <iterator>
#include <set>
#include <type_traits>
#include <utility>

#include "topotrain/batch/packed_batch.h"

namespace topotrain {
namespace {

using I64 = std::vector<std::int64_t>;

I64 vec(const at::Tensor& t) {
  const at::Tensor l = t.to(at::kLong).contiguous();
  return I64(l.data_ptr<std::int64_t>(), l.data_ptr<std::int64_t>() + l.numel());
}

// Counts an aggregate's members: the largest N for which T{x1, ..., xN} compiles, where each
// x converts to any member type. Counted from above, so that no probe leaves members out.
struct AnyMember {
  template <typename T>
  operator T() const;
};
template <typename T, typename Indices, typename = void>
struct BraceInitializable : std::false_type {};
template <typename T, std::size_t... I>
struct BraceInitializable<T, std::index_sequence<I...>, std::void_t<decltype(T{(void(I), AnyMember{})...})>>
    : std::true_type {};
template <typename T, std::size_t N = 32>
constexpr std::size_t member_count() {
  if constexpr (N == 0 || BraceInitializable<T, std::make_index_sequence<N>>::value) return N;
  else return member_count<T, N - 1>();
}

TEST(PackedBatch, TheFieldTableListsEveryTensorMemberOnce) {
  static_assert(std::is_aggregate_v<PackedBatch>);
  // The host fields summarize() derives (max_seqlen, sequence_lengths, num_loss_targets);
  // every other member must be a row of kPackedBatchFields. A member added to PackedBatch
  // without a row (or without a summary in summarize()) fails here.
  constexpr std::size_t kHostFields = 3;
  EXPECT_EQ(member_count<PackedBatch>(), std::size(kPackedBatchFields) + kHostFields);
  std::set<std::string> names;
  PackedBatch batch;
  for (const PackedBatchField& field : kPackedBatchFields) {
    EXPECT_TRUE(names.insert(field.name).second) << field.name << " listed twice";
    EXPECT_FALSE((batch.*field.member).defined());
    batch.*field.member = at::zeros({1});  // each row names its own member: none is set twice
  }
  for (at::Tensor* t : {&batch.tokens, &batch.positions, &batch.cu_seqlens, &batch.loss_mask, &batch.sample_ids})
    EXPECT_TRUE(t->defined());
}

TEST(PackedBatch, FromDocumentsIsWorkedOutByHand) {
  const PackedBatch b = PackedBatch::from_documents({{7, 8, 9}, {4, 5}});
  EXPECT_EQ(vec(b.tokens), (I64{7, 8, 9, 4, 5}));
  EXPECT_EQ(vec(b.positions), (I64{0, 1, 2, 0, 1}));
  EXPECT_EQ(vec(b.cu_seqlens), (I64{0, 3, 5}));
  EXPECT_EQ(vec(b.loss_mask), (I64{1, 1, 1, 1, 1}));
  EXPECT_EQ(vec(b.sample_ids), (I64{0, 1}));
  for (const PackedBatchField& field : kPackedBatchFields) EXPECT_EQ((b.*field.member).scalar_type(), field.dtype);
  EXPECT_EQ(b.num_tokens(), 5);
  EXPECT_EQ(b.num_sequences(), 2);
  EXPECT_EQ(b.max_seqlen, 3);
  EXPECT_EQ(b.sequence_lengths, (I64{3, 2}));
  EXPECT_EQ(b.num_loss_targets, 2 + 1);  // every token but a sequence's first
  EXPECT_NO_THROW(b.check());
  EXPECT_THROW(PackedBatch::from_documents({{1}, {}}), std::invalid_argument);
}

TEST(PackedBatch, SummarizeCountsLossTargetsWithinSequences) {
  PackedBatch b = PackedBatch::from_documents({{1, 2, 3}, {4, 5, 6, 7}});
  b.loss_mask = at::tensor(std::vector<std::uint8_t>{1, 0, 1, 1, 1, 0, 1}).to(at::kByte);
  b.summarize();
  // Rows 1, 2 of the first sequence (mask 0, 1) and rows 4..6 of the second (1, 0, 1); row 3
  // has mask 1 but starts its sequence, so nothing in the batch predicts it.
  EXPECT_EQ(b.num_loss_targets, 1 + 2);
  b.loss_mask = at::Tensor();  // undefined: all ones
  b.summarize();
  EXPECT_EQ(b.num_loss_targets, 2 + 3);
  PackedBatch empty;
  empty.tokens = at::empty({0}, at::kLong);
  empty.cu_seqlens = at::zeros({1}, at::kInt);
  empty.summarize();
  EXPECT_EQ(empty.num_sequences(), 0);
  EXPECT_EQ(empty.max_seqlen, 0);
  EXPECT_THROW(empty.check(), std::invalid_argument) << "the models take no empty batch";
  b.cu_seqlens = at::tensor(std::vector<std::int32_t>{0, 5, 3, 7});
  EXPECT_THROW(b.summarize(), std::invalid_argument) << "decreasing";
  b.cu_seqlens = at::tensor(std::vector<std::int32_t>{0, 3, 6});
  EXPECT_THROW(b.summarize(), std::invalid_argument) << "ends short of the tokens";
}

TEST(PackedBatch, ToMovesEveryFieldAndKeepsTheHostFields) {
  PackedBatch b = PackedBatch::from_documents({{1, 2}, {3}});
  b.num_loss_targets = 42;  // carried as it is, not recounted
  const PackedBatch moved = b.to(at::kCPU);
  for (const PackedBatchField& field : kPackedBatchFields) {
    EXPECT_TRUE(at::equal(moved.*field.member, b.*field.member)) << field.name;
  }
  EXPECT_EQ(moved.sequence_lengths, b.sequence_lengths);
  EXPECT_EQ(moved.max_seqlen, b.max_seqlen);
  EXPECT_EQ(moved.num_loss_targets, 42);
  b.sample_ids = at::Tensor();
  EXPECT_FALSE(b.to(at::kCPU).sample_ids.defined()) << "an optional field left out stays out";
}

TEST(PackedBatch, CheckRefusesWhatBreaksTheContract) {
  const PackedBatch good = PackedBatch::from_documents({{1, 2, 3}, {4, 5}});
  PackedBatch b = good;
  b.loss_mask = at::Tensor();
  b.sample_ids = at::Tensor();
  EXPECT_NO_THROW(b.check()) << "loss_mask and sample_ids are optional";
  for (const PackedBatchField& field : kPackedBatchFields) {
    b = good;
    b.*field.member = (b.*field.member).to(at::kFloat);
    EXPECT_THROW(b.check(), std::invalid_argument) << field.name << " of the wrong dtype";
    b = good;
    b.*field.member = (b.*field.member).narrow(0, 0, 1);
    EXPECT_THROW(b.check(), std::invalid_argument) << field.name << " of the wrong length";
  }
  b = good;
  b.tokens = at::Tensor();
  EXPECT_THROW(b.check(), std::invalid_argument);
  b = good;
  b.cu_seqlens = at::tensor(std::vector<std::int32_t>{0, 5, 5});
  b.sequence_lengths = {5, 0};
  EXPECT_THROW(b.check(), std::invalid_argument) << "an empty sequence";
}

}  // namespace
}  // namespace topotrain
