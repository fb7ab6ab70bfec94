// On a GPU: batches are packed into pinned memory, arrive on the device through the copy
// stream, and read correctly on the trainer's stream.
#include <gtest/gtest.h>

#include "topotrain/data/prefetcher.h"

namespace topotrain::data {
namespace {

std::shared_ptr<const TokenDataset> small_dataset() {
  TokenDatasetContents c;
  c.vocab_size = 100;
  for (int d = 0; d < 300; ++d) {
    for (int i = 0; i <= d % 37; ++i) {
      c.tokens.push_back((d + i) % 100);
      c.loss_mask.push_back(i % 3 == 0);
    }
    c.offsets.push_back(c.tokens.size());
  }
  return std::make_shared<const TokenDataset>(TokenDataset::from_contents(std::move(c), "gpu-test"));
}

TEST(PrefetcherGpu, PinnedBatchesReachTheDeviceIntact) {
  ASSERT_TRUE(torch::cuda::is_available());
  const auto data = small_dataset();
  const DataParallelConfig parallel{2, 0, 3};
  StepPlanner reference(data, PackerConfig{64, LongSamplePolicy::split, true, false, {}}, parallel, DataPosition{5, 0, 0, 0});
  auto pinned = std::make_shared<StepPlanner>(data, PackerConfig{64, LongSamplePolicy::split, true, true, {}}, parallel,
                                              DataPosition{5, 0, 0, 0});
  Prefetcher prefetcher(
      [pinned] {
        StepPlan plan = pinned->next_step();
        for (const PackedBatch& b : plan.micro_batches) {
          if (!b.tokens.is_pinned() || !b.loss_mask.is_pinned()) throw std::runtime_error("batch not pinned");
        }
        return plan;
      },
      PrefetchConfig{3, torch::Device(torch::kCUDA, 0)});
  for (int step = 0; step < 50; ++step) {
    const StepPlan expected = reference.next_step();
    const StepPlan got = prefetcher.next();
    // The step's copies were timed on the copy stream: one span, handed out once.
    const DeviceSpans copies = prefetcher.take_device_spans();
    ASSERT_EQ(copies.size(), 1u);
    EXPECT_TRUE(prefetcher.take_device_spans().empty());
    float copy_ms = -1;
    ASSERT_EQ(cudaEventSynchronize(copies[0].end_event()), cudaSuccess);
    ASSERT_EQ(cudaEventElapsedTime(&copy_ms, copies[0].begin_event(), copies[0].end_event()), cudaSuccess);
    EXPECT_GE(copy_ms, 0);
    ASSERT_EQ(got.micro_batches.size(), expected.micro_batches.size());
    EXPECT_EQ(got.position_after, expected.position_after);
    for (size_t k = 0; k < got.micro_batches.size(); ++k) {
      const PackedBatch& g = got.micro_batches[k];
      const PackedBatch& e = expected.micro_batches[k];
      ASSERT_TRUE(g.tokens.is_cuda());
      // Work on the current (trainer) stream, then compare on the host.
      EXPECT_TRUE(torch::equal((g.tokens * 2 + g.positions).cpu(), e.tokens * 2 + e.positions));
      EXPECT_TRUE(torch::equal(g.cu_seqlens.cpu(), e.cu_seqlens));
      EXPECT_TRUE(torch::equal(g.loss_mask.cpu(), e.loss_mask));
    }
  }
}

TEST(PrefetcherGpu, ProducerErrorStillReachesTheTrainer) {
  Prefetcher prefetcher([]() -> StepPlan { throw std::runtime_error("no data on this GPU"); },
                        PrefetchConfig{2, torch::Device(torch::kCUDA, 0)});
  try {
    prefetcher.next();
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "no data on this GPU");
  }
}

}  // namespace
}  // namespace topotrain::data
