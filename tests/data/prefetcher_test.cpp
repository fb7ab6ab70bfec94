// The prefetcher hands over the producer's steps in order, rethrows its exception with the
// message, and stops its thread when destroyed even while the queue is full.
#include <gtest/gtest.h>

#include <atomic>

#include "topotrain/data/prefetcher.h"

namespace topotrain::data {
namespace {

StepPlan numbered_step(uint64_t n) {
  StepPlan plan;
  plan.position_after.consumed_samples = n;
  return plan;
}

TEST(Prefetcher, DeliversStepsInOrder) {
  std::atomic<uint64_t> produced{0};
  Prefetcher prefetcher([&] { return numbered_step(produced++); }, PrefetchConfig{3, torch::kCPU});
  for (uint64_t n = 0; n < 20; ++n) EXPECT_EQ(prefetcher.next().position_after.consumed_samples, n);
  EXPECT_LE(produced.load(), 20u + 3u + 1u) << "the queue is bounded";
}

TEST(Prefetcher, ProducerExceptionReachesTheTrainerAfterEarlierSteps) {
  uint64_t produced = 0;
  Prefetcher prefetcher(
      [&] {
        if (produced == 3) throw std::runtime_error("dataset went away at step 3");
        return numbered_step(produced++);
      },
      PrefetchConfig{2, torch::kCPU});
  for (uint64_t n = 0; n < 3; ++n) EXPECT_EQ(prefetcher.next().position_after.consumed_samples, n);
  try {
    prefetcher.next();
    FAIL() << "the producer's exception must be rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "dataset went away at step 3");
  }
}

TEST(Prefetcher, DestructionWithAFullQueueJoinsTheThread) {
  std::atomic<int> calls{0};
  {
    Prefetcher prefetcher([&] { return numbered_step(calls++); }, PrefetchConfig{1, torch::kCPU});
    prefetcher.next();
  }
  const int after = calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(calls.load(), after) << "no producer call after destruction";
}

TEST(Prefetcher, PacksRealStepsLikeThePlannerItself) {
  at::set_num_threads(1);
  TokenDatasetContents c;
  c.vocab_size = 10;
  for (int d = 0; d < 40; ++d) {
    for (int i = 0; i <= d % 9; ++i) c.tokens.push_back(i);
    c.offsets.push_back(c.tokens.size());
  }
  auto data = std::make_shared<const TokenDataset>(TokenDataset::from_contents(std::move(c), "small"));
  const PackerConfig packing{16, LongSamplePolicy::split, true, false, {}};
  StepPlanner direct(data, packing, DataParallelConfig{2, 1, 2}, DataPosition{9, 0, 0, 0});
  auto planner = std::make_shared<StepPlanner>(data, packing, DataParallelConfig{2, 1, 2}, DataPosition{9, 0, 0, 0});
  Prefetcher prefetcher([planner] { return planner->next_step(); }, PrefetchConfig{2, torch::kCPU});
  for (int step = 0; step < 30; ++step) {
    const StepPlan expected = direct.next_step();
    const StepPlan got = prefetcher.next();
    EXPECT_EQ(got.position_after, expected.position_after);
    ASSERT_EQ(got.micro_batches.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_TRUE(torch::equal(got.micro_batches[k].tokens, expected.micro_batches[k].tokens));
      EXPECT_TRUE(torch::equal(got.micro_batches[k].sample_ids, expected.micro_batches[k].sample_ids));
    }
  }
}

}  // namespace
}  // namespace topotrain::data
