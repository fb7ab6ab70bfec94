// Builds the next optimizer steps' micro-batches on a background thread so that the
// trainer never waits for packing.
//
// The queue holds at most `depth` finished steps. For a CUDA device the producer should
// pin its batches (PackerConfig::pin_memory); the thread then copies them to the GPU on
// its own stream, and next() makes the caller's current stream wait for that copy, so the
// copy overlaps the previous step's compute; the copy's device time comes back as a
// DeviceSpan (take_device_spans). An exception in the producer is rethrown by
// next() (same type and message) once the steps produced before it are consumed. The
// destructor stops and joins the thread: no thread outlives the object.
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "topotrain/core/device_span.h"
#include "topotrain/data/step_planner.h"

namespace topotrain::data {

struct PrefetchConfig {
  size_t depth = 2;                        // steps built ahead of the trainer
  torch::Device device = torch::kCPU;      // where next() delivers the batches
};

class Prefetcher {
 public:
  Prefetcher(std::function<StepPlan()> produce, PrefetchConfig config);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Blocks until the next step is ready; rethrows the producer's exception.
  StepPlan next();
  // The device time of the host-to-device copies of the step next() last returned, on the
  // copy stream (recorded while the step before was computing), moved out; empty on a CPU
  // device. Dropped by the next call of next() when not taken.
  DeviceSpans take_device_spans() { return std::exchange(copy_spans_, {}); }

 private:
  struct Ready;  // a finished step (and, on CUDA, the event its copy records)
  void run();
  Ready build();

  std::function<StepPlan()> produce_;
  PrefetchConfig config_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Ready>> queue_;
  std::exception_ptr error_;
  bool stopping_ = false;
  DeviceSpans copy_spans_;  // of the step next() last returned; the trainer's thread only
  std::thread thread_;  // last: starts after every other member is constructed
};

}  // namespace topotrain::data
