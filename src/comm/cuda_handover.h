// Handing a tensor produced on a side stream to the consumer's stream (internal, CUDA).
#pragma once

#ifdef TOPOTRAIN_CUDA

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include <functional>
#include <memory>

namespace topotrain::comm::detail {

// Records completion of the work queued so far on `producer`; the returned callback,
// run by the consumer, makes its current stream wait for it and tells the caching
// allocator that the consumer's stream now uses the tensor too.
inline std::function<void()> hand_over(const at::Tensor& tensor, c10::cuda::CUDAStream producer) {
  auto done = std::make_shared<at::cuda::CUDAEvent>();
  done->record(producer);
  return [tensor, done] {
    c10::cuda::CUDAStream consumer = c10::cuda::getCurrentCUDAStream(tensor.device().index());
    done->block(consumer);
    c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), consumer);
  };
}

}  // namespace topotrain::comm::detail

#endif  // TOPOTRAIN_CUDA
