#include <gtest/gtest.h>

#include <thread>

#include "topotrain/store/nvml_sampler.h"
#include "topotrain/store/phase_timer.h"

using namespace topotrain;

TEST(PhaseTimer, NestedScopesAreExclusiveAndSpansKeepTheirExtent) {
  PhaseTimer timer;
  timer.begin_step(7);
  {
    auto outer = timer.scope(Phase::forward);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    {
      auto inner = timer.scope(Phase::send);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  { auto again = timer.scope(Phase::forward); }
  StepMetrics metrics;
  metrics.tokens = 128;
  timer.end_step(metrics);
  auto records = timer.take_finished();
  ASSERT_EQ(records.size(), 1u);
  const StepRecord& r = records[0];
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.metrics.tokens, 128);
  ASSERT_EQ(r.spans.size(), 3u);  // closed order: send, forward, forward
  EXPECT_EQ(r.spans[0].phase, Phase::send);
  EXPECT_EQ(r.spans[1].phase, Phase::forward);
  // forward excludes the nested send: its total is its spans minus the inner span.
  const double forward_spans = r.spans[1].seconds + r.spans[2].seconds;
  EXPECT_NEAR(r.phase_seconds[static_cast<int>(Phase::forward)], forward_spans - r.spans[0].seconds, 1e-9);
  EXPECT_NEAR(r.phase_seconds[static_cast<int>(Phase::send)], r.spans[0].seconds, 1e-12);
  EXPECT_GE(r.phase_seconds[static_cast<int>(Phase::send)], 0.002);
  EXPECT_LE(r.named_seconds(), r.wall);
  EXPECT_NEAR(r.other_seconds(), r.wall - r.named_seconds(), 1e-12);
  // The inner span lies inside the outer one.
  EXPECT_GE(r.spans[0].start, r.spans[1].start);
  EXPECT_LE(r.spans[0].start + r.spans[0].seconds, r.spans[1].start + r.spans[1].seconds + 1e-12);
  EXPECT_TRUE(timer.take_finished().empty());
}

TEST(PhaseTimer, MisuseIsRejected) {
  PhaseTimer timer;
  EXPECT_THROW((void)timer.scope(Phase::forward), std::logic_error);
  EXPECT_THROW(timer.end_step({}), std::logic_error);
  timer.begin_step(0);
  EXPECT_THROW(timer.begin_step(1), std::logic_error);
  {
    auto open = timer.scope(Phase::backward);
    EXPECT_THROW(timer.end_step({}), std::logic_error);
  }
  EXPECT_NO_THROW(timer.end_step({}));
}

TEST(PhaseTimer, StepSecondsOfTheOpenStep) {
  PhaseTimer timer;
  timer.begin_step(1);
  {
    auto t = timer.scope(Phase::comm_wait);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  const double comm = timer.step_seconds(Phase::comm_wait);
  EXPECT_GE(comm, 0.003);
  EXPECT_EQ(timer.step_seconds(Phase::forward), 0.0);
  timer.end_step({});
  const auto records = timer.take_finished();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].phase_seconds[static_cast<int>(Phase::comm_wait)], comm);  // what end_step records
}

TEST(PhaseTimer, ADiscardedStepLeavesNoRecord) {
  PhaseTimer timer;
  timer.begin_step(1);
  timer.end_step({});
  timer.begin_step(2);
  { auto t = timer.scope(Phase::queue_wait); }
  timer.discard_step();
  EXPECT_FALSE(timer.in_step());
  timer.finish();
  const auto records = timer.take_finished();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].step, 1);
  // A step with an open scope cannot be dropped, nor one never begun.
  timer.begin_step(3);
  auto open = timer.scope(Phase::forward);
  EXPECT_THROW(timer.discard_step(), std::logic_error);
}

TEST(PhaseTimer, DiscardWithoutAStepIsRejected) {
  PhaseTimer timer;
  EXPECT_THROW(timer.discard_step(), std::logic_error);
}

TEST(NvmlSampler, WithoutTheLibraryIsInactive) {
  NvmlSampler sampler(0, 100, std::chrono::steady_clock::now(), "libnvidia-ml-absent.so.1");
  EXPECT_FALSE(sampler.active());
  EXPECT_TRUE(sampler.drain().empty());
}
