// The trivial drafters' counts against a hand count, and the drafter's forward handing them
// exactly the labels of the slots it scored.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "topotrain/model/dflash_metrics.h"

namespace mdl = topotrain::model;

namespace {

std::vector<int64_t> values(const torch::Tensor& t) {
  const torch::Tensor c = t.to(torch::kInt64).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

}  // namespace

TEST(TrivialDrafterCounts, MatchAHandCount) {
  // Block 3, vocabulary 5. Slot 1 labels: 4 4 2 1; slot 2 labels: 2 2 2 4 0. Over all slots
  // 2 is seen 4 times, 4 three times: the mode drafter drafts 2 everywhere and gets 1 of slot
  // 1's and 3 of slot 2's right; the slot-mode drafter drafts 4 in slot 1 (2 right) and 2 in
  // slot 2 (3 right).
  mdl::TrivialDrafterCounts counts(3, 5);
  EXPECT_EQ(values(counts.correct()), (std::vector<int64_t>{0, 0, 0, 0, 0, 0}));  // nothing added yet
  counts.add(torch::tensor({1, 2, 1, 2}, torch::kInt64), torch::tensor({4, 2, 4, 2}, torch::kInt64));
  counts.add(torch::tensor({1, 1, 2, 2, 2}, torch::kInt64), torch::tensor({2, 1, 2, 4, 0}, torch::kInt64));
  counts.add(torch::tensor(std::vector<int64_t>{}, torch::kInt64), torch::tensor(std::vector<int64_t>{}, torch::kInt64));
  EXPECT_EQ(values(counts.correct()), (std::vector<int64_t>{0, 1, 3, 0, 2, 3}));
}

TEST(TrivialDrafterCounts, RefuseADegenerateShape) {
  EXPECT_THROW(mdl::TrivialDrafterCounts(1, 5), std::invalid_argument);
  EXPECT_THROW(mdl::TrivialDrafterCounts(4, 0), std::invalid_argument);
}
