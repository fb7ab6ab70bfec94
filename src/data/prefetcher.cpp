#include "topotrain/data/prefetcher.h"

#ifdef TOPOTRAIN_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>
#endif

#include "topotrain/core/error.h"
#include "topotrain/torch_compat.h"

namespace topotrain::data {

struct Prefetcher::Ready {
  StepPlan plan;
#ifdef TOPOTRAIN_CUDA
  std::unique_ptr<at::cuda::CUDAEvent> copied;  // recorded on the copy stream after the last H2D
  std::optional<DeviceSpan> copy_time;          // brackets the step's copies on the copy stream
#endif
};

Prefetcher::Prefetcher(std::function<StepPlan()> produce, PrefetchConfig config)
    : produce_(std::move(produce)), config_(config) {
  if (config_.depth == 0) throw ConfigError("data.prefetch_depth must be at least 1");
  if (config_.device.is_cuda() && !compat::kCudaBuild) {
    throw ConfigError("the prefetcher was asked for a CUDA device in a build without CUDA");
  }
  thread_ = std::thread([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

Prefetcher::Ready Prefetcher::build() {
  Ready ready;
  ready.plan = produce_();
#ifdef TOPOTRAIN_CUDA
  if (config_.device.is_cuda()) {
    // The copy stream is this thread's own: H2D of the next step overlaps compute of the
    // current one on the trainer's stream.
    c10::cuda::CUDAGuard device_guard(config_.device);
    static thread_local c10::cuda::CUDAStream copy_stream = c10::cuda::getStreamFromPool(false, config_.device.index());
    c10::cuda::CUDAStreamGuard stream_guard(copy_stream);
    ready.copy_time.emplace(copy_stream.stream());
    for (PackedBatch& batch : ready.plan.micro_batches) batch = batch.to(config_.device, /*non_blocking=*/true);
    ready.copy_time->close();
    ready.copied = std::make_unique<at::cuda::CUDAEvent>();
    ready.copied->record(copy_stream);
  }
#endif
  return ready;
}

void Prefetcher::run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || queue_.size() < config_.depth; });
      if (stopping_) return;
    }
    try {
      auto ready = std::make_unique<Ready>(build());
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(ready));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    changed_.notify_all();
  }
}

StepPlan Prefetcher::next() {
  std::unique_ptr<Ready> ready;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !queue_.empty() || error_; });
    if (queue_.empty()) std::rethrow_exception(error_);
    ready = std::move(queue_.front());
    queue_.pop_front();
  }
  changed_.notify_all();
  copy_spans_.clear();
#ifdef TOPOTRAIN_CUDA
  if (ready->copy_time) copy_spans_.push_back(std::move(*ready->copy_time));
  if (ready->copied) {
    // The batches were allocated on the copy stream: the caching allocator must not hand
    // their memory out again before the trainer's stream is done with them.
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(config_.device.index());
    ready->copied->block(compute);
    for (PackedBatch& batch : ready->plan.micro_batches) {
      for (const PackedBatchField& field : kPackedBatchFields) (batch.*field.member).record_stream(compute);
    }
  }
#endif
  return std::move(ready->plan);
}

}  // namespace topotrain::data
