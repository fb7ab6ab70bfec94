// The one place where a CUDA build and a CPU-only build differ.
//
// Every machine builds against one LibTorch, pip torch 2.11 (cmake/TopotrainDeps.cmake
// refuses an older one); TOPOTRAIN_CUDA is defined where our CUDA code is compiled as well
// (a CUDA LibTorch and a CUDA toolkit). Model and trainer code calls what is declared here
// instead of testing TOPOTRAIN_CUDA itself.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#ifdef TOPOTRAIN_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace topotrain::compat {

// True when this build can run CUDA kernels (CMake defines TOPOTRAIN_CUDA:
// cmake/TopotrainDeps.cmake).
constexpr bool kCudaBuild =
#ifdef TOPOTRAIN_CUDA
    true;
#else
    false;
#endif

// What torch's caching allocator counts on `device`: the bytes handed out to tensors
// (allocated) or held from the driver (reserved: allocated or cached, fragmentation
// included), now or at the peak since the last reset; 0 on CPU, where torch keeps no such
// statistic.
enum class AllocatorBytes { allocated, reserved };
inline std::int64_t allocator_bytes(const at::Device& device, AllocatorBytes which, bool peak) {
#ifdef TOPOTRAIN_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto& counts = which == AllocatorBytes::allocated ? stats.allocated_bytes : stats.reserved_bytes;
    const auto& stat = counts[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    return peak ? stat.peak : stat.current;
  }
#endif
  (void)device;
  (void)which;
  (void)peak;
  return 0;
}

inline std::int64_t peak_allocated_bytes(const at::Device& device) {
  return allocator_bytes(device, AllocatorBytes::allocated, /*peak=*/true);
}

// Bytes in use on the current CUDA device by everything, this process's CUDA context and
// libraries and other processes included (cudaMemGetInfo); 0 in a CPU build.
inline std::int64_t device_used_bytes() {
#ifdef TOPOTRAIN_CUDA
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    (void)cudaGetLastError();  // a failed query must not surface in a later CUDA call
    return 0;
  }
  return static_cast<std::int64_t>(total - free);
#else
  return 0;
#endif
}

// `bytes` of page-locked host memory as a uint8 CPU tensor, from one cudaHostAlloc of
// exactly that size (torch's pinned allocator rounds every block up to a power of two:
// 8 GiB for a 5.6 GiB checkpoint). CUDA builds only; the error names the size.
inline at::Tensor pinned_host_bytes(std::int64_t bytes) {
#ifdef TOPOTRAIN_CUDA
  void* memory = nullptr;
  const cudaError_t status = cudaHostAlloc(&memory, static_cast<std::size_t>(bytes), cudaHostAllocDefault);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error("cannot allocate " + std::to_string(bytes) + " bytes of pinned host memory: " +
                             cudaGetErrorString(status));
  }
  return at::from_blob(memory, {bytes}, [](void* p) { (void)cudaFreeHost(p); },
                       at::TensorOptions().dtype(at::kByte).device(at::kCPU));
#else
  (void)bytes;
  throw std::logic_error("pinned host memory needs a CUDA build");
#endif
}

// Total memory of CUDA device `index`; 0 where there is none (a CPU build, or a machine
// without that GPU, as in a dry run of a cluster's topology).
inline std::int64_t device_total_bytes(int index) {
#ifdef TOPOTRAIN_CUDA
  int count = 0;
  cudaDeviceProp properties;
  if (cudaGetDeviceCount(&count) != cudaSuccess || index < 0 || index >= count ||
      cudaGetDeviceProperties(&properties, index) != cudaSuccess) {
    (void)cudaGetLastError();  // a failed query must not surface in a later CUDA call
    return 0;
  }
  return static_cast<std::int64_t>(properties.totalGlobalMem);
#else
  (void)index;
  return 0;
#endif
}

// The PCI bus id of CUDA device `index` ("0000:1b:00.0"), the same in every process that
// sees the GPU whatever CUDA_VISIBLE_DEVICES renumbers; "" where there is none.
inline std::string device_bus_id(int index) {
#ifdef TOPOTRAIN_CUDA
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof id, index) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  return id;
#else
  (void)index;
  return {};
#endif
}

// Resets every peak allocator_bytes reports (allocated and reserved alike).
inline void reset_peak_allocated_bytes(const at::Device& device) {
#ifdef TOPOTRAIN_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
  (void)device;
}

// Returns cached blocks to the driver, so that a retry after an out-of-memory error
// starts from an unfragmented pool.
inline void release_cached_memory(const at::Device& device) {
#ifdef TOPOTRAIN_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  (void)device;
}

#ifdef TOPOTRAIN_CUDA
// The stream work on `device` is queued on now (torch's current stream).
inline cudaStream_t current_stream(const at::Device& device) {
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
}
#endif

// A tensor's values on their way to the host: made, it enqueues their copy into pinned
// memory on the current stream; wait() returns that copy once it is done, without waiting
// for the work enqueued after it (so the host can read a step's values while the device
// runs what was queued behind them). A CPU tensor is its own copy.
class HostCopy {
 public:
  explicit HostCopy(const at::Tensor& values) {
#ifdef TOPOTRAIN_CUDA
    if (values.is_cuda()) {
      host_ = at::empty(values.sizes(), values.options().device(at::kCPU).pinned_memory(true));
      host_.copy_(values, /*non_blocking=*/true);
      copied_.emplace();
      copied_->record(c10::cuda::getCurrentCUDAStream(values.device().index()));
      return;
    }
#endif
    host_ = values;
  }
  const at::Tensor& wait() {
#ifdef TOPOTRAIN_CUDA
    if (copied_) copied_->synchronize();
#endif
    return host_;
  }

 private:
  at::Tensor host_;
#ifdef TOPOTRAIN_CUDA
  std::optional<at::cuda::CUDAEvent> copied_;
#endif
};

// Waits for the work queued on the device's current stream, so that a CPU-timed phase
// ends when its kernels do rather than when they were launched.
inline void synchronize(const at::Device& device) {
#ifdef TOPOTRAIN_CUDA
  if (device.is_cuda()) c10::cuda::getCurrentCUDAStream(device.index()).synchronize();
#endif
  (void)device;
}

inline std::string device_name(const at::Device& device) {
#ifdef TOPOTRAIN_CUDA
  if (device.is_cuda()) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, device.index()) == cudaSuccess) return properties.name;
  }
#endif
  return device.str();
}

}  // namespace topotrain::compat
