// A stretch of time on one stream of work, marked at its two ends when the work is
// enqueued and read later: how comm/ and data/, which enqueue work on CUDA streams of
// their own (the gradient all-reduce on the NCCL stream, the batch copies on the prefetch
// stream), hand its device time to whoever times the step (store/'s
// PhaseTimer::add_gpu_spans) without depending on it.
//
//   DeviceSpan span(stream);   // marks the begin: an event recorded on `stream`
//   ... enqueue work on stream ...
//   span.close();              // marks the end: an event recorded after that work
//
// CUDA builds: the marks are two timing events the span owns (destroyed with it); their
// times are known once the end event has completed on the device, and reading them is the
// holder's business (the timer reads them a step later, never stalling a stream). CPU
// builds have no streams: the marks are host clock readings taken when the span is made
// and closed. Nothing on a CPU path makes spans (no work runs asynchronously there); tests
// do, to check what reads them.
#pragma once

#include <chrono>
#include <vector>

#ifdef TOPOTRAIN_CUDA
#include <cuda_runtime_api.h>
#endif

namespace topotrain {

class DeviceSpan {
 public:
#ifdef TOPOTRAIN_CUDA
  // Throws std::runtime_error naming the CUDA error when an event cannot be made or recorded.
  explicit DeviceSpan(cudaStream_t stream);
  cudaStream_t stream() const { return stream_; }
  cudaEvent_t begin_event() const { return begin_; }
  cudaEvent_t end_event() const { return end_; }
#else
  using Clock = std::chrono::steady_clock;
  DeviceSpan() : begin_(Clock::now()), end_(begin_) {}
  Clock::time_point begin_time() const { return begin_; }
  Clock::time_point end_time() const { return end_; }
#endif
  ~DeviceSpan();
  DeviceSpan(DeviceSpan&& other) noexcept;
  DeviceSpan& operator=(DeviceSpan&& other) noexcept;
  DeviceSpan(const DeviceSpan&) = delete;
  DeviceSpan& operator=(const DeviceSpan&) = delete;

  // Marks the end, after the work enqueued since the begin. Once per span.
  void close();

 private:
#ifdef TOPOTRAIN_CUDA
  cudaStream_t stream_ = nullptr;
  cudaEvent_t begin_ = nullptr;  // null once moved from
  cudaEvent_t end_ = nullptr;
#else
  Clock::time_point begin_, end_;
#endif
};

using DeviceSpans = std::vector<DeviceSpan>;

}  // namespace topotrain
