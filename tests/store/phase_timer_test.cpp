#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include <ATen/record_function.h>

#include "topotrain/store/nvml_sampler.h"
#include "topotrain/store/phase_timer.h"

using namespace topotrain;

namespace {

// What a profiler would see: the user ranges opened and closed on this thread.
std::vector<std::string> profiler_events;

std::unique_ptr<at::ObserverContext> range_opened(const at::RecordFunction& range) {
  profiler_events.push_back(std::string("open ") + range.name());
  return nullptr;
}

void range_closed(const at::RecordFunction& range, at::ObserverContext*) {
  profiler_events.push_back(std::string("close ") + range.name());
}

}  // namespace

TEST(PhaseTimer, UnderAProfilerEveryScopeIsARangeNamedAfterItsPhase) {
  PhaseTimer timer;
  timer.begin_step(1);
  { auto unobserved = timer.scope(Phase::h2d); }
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(range_opened, range_closed).scopes({at::RecordScope::USER_SCOPE}));
  {
    auto forward = timer.scope(Phase::forward);
    { auto inner = timer.scope(Phase::send); }
    auto moved = std::move(forward);  // the range moves with the scope and closes once
  }
  at::removeCallback(handle);
  timer.end_step(StepMetrics{});
  EXPECT_EQ(profiler_events, (std::vector<std::string>{"open phase:forward", "open phase:send", "close phase:send",
                                                        "close phase:forward"}));
}

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

#ifndef TOPOTRAIN_CUDA
// In a CPU build a DeviceSpan brackets host time, so the filing of spans recorded outside
// the timer is checked here against the spans' own time points (a CUDA build checks it
// with events: tests/train/phase_timer_gpu_test.cpp).
namespace {

double between(DeviceSpan::Clock::time_point a, DeviceSpan::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
void pause_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
DeviceSpans one(DeviceSpan span) {
  DeviceSpans spans;
  spans.push_back(std::move(span));
  return spans;
}

}  // namespace

TEST(PhaseTimer, AddedSpansKeepTheirTimesAndTheirOverlapIsCountedOnce) {
  const auto epoch = PhaseTimer::Clock::now();
  PhaseTimer timer(epoch);
  timer.begin_step(4);
  { auto t = timer.scope(Phase::data_wait); pause_ms(1); }
  // backward [b0, b1), a first all-reduce [c0, c1) that starts under it and ends after it,
  // a second [d0, d1) after backward.
  DeviceSpan backward;
  pause_ms(3);
  DeviceSpan comm;
  pause_ms(4);
  backward.close();
  pause_ms(2);
  comm.close();
  pause_ms(1);
  DeviceSpan late_comm;
  pause_ms(2);
  late_comm.close();
  const double b = between(backward.begin_time(), backward.end_time());
  const double c = between(comm.begin_time(), comm.end_time());
  const double d = between(late_comm.begin_time(), late_comm.end_time());
  const double under_backward = between(comm.begin_time(), backward.end_time());
  const double backward_start = between(epoch, backward.begin_time());
  timer.add_gpu_spans(Phase::backward, one(std::move(backward)));
  DeviceSpans comms;
  comms.push_back(std::move(comm));
  comms.push_back(std::move(late_comm));
  timer.add_gpu_spans(Phase::comm_wait, std::move(comms));
  timer.end_step({});

  const auto records = timer.take_finished();
  ASSERT_EQ(records.size(), 1u);
  const StepRecord& r = records[0];
  EXPECT_NEAR(r.phase_seconds[static_cast<int>(Phase::backward)], b, 1e-9);
  EXPECT_NEAR(r.phase_seconds[static_cast<int>(Phase::comm_wait)], c + d, 1e-9);
  EXPECT_GE(under_backward, 0.003);
  EXPECT_NEAR(r.comm_overlap_seconds, under_backward, 1e-9);
  EXPECT_NEAR(r.overlap_seconds, under_backward, 1e-9);
  // The phases together exceed what they cover by the overlap; `other` is the rest of the wall.
  EXPECT_GT(r.named_seconds() + r.other_seconds(), r.wall);
  EXPECT_NEAR(r.other_seconds(), r.wall - (r.named_seconds() - under_backward), 1e-9);
  EXPECT_GE(r.other_seconds(), 0);
  ASSERT_EQ(r.spans.size(), 4u);  // data_wait (CPU), then the added ones in order
  EXPECT_FALSE(r.spans[0].gpu);
  EXPECT_EQ(r.spans[1].phase, Phase::backward);
  EXPECT_TRUE(r.spans[1].gpu);
  EXPECT_NEAR(r.spans[1].start, backward_start, 1e-9);
  EXPECT_EQ(r.spans[3].phase, Phase::comm_wait);
  EXPECT_NEAR(r.spans[3].seconds, d, 1e-9);
}

TEST(PhaseTimer, AddedSpansNeedAStepAndGoWithADiscardedOne) {
  PhaseTimer timer;
  EXPECT_THROW(timer.add_gpu_spans(Phase::comm_wait, one(DeviceSpan())), std::logic_error);
  timer.begin_step(1);
  timer.add_gpu_spans(Phase::comm_wait, one(DeviceSpan()));
  timer.discard_step();
  timer.begin_step(2);
  timer.end_step({});
  const auto records = timer.take_finished();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].step, 2);
  EXPECT_EQ(records[0].phase_seconds[static_cast<int>(Phase::comm_wait)], 0);
  EXPECT_TRUE(records[0].spans.empty());
}
#endif
