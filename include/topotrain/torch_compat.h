// The one place where LibTorch versions and CUDA availability differ.
//
// The CPU machine and CI build against Debian's LibTorch 1.13 (CPU only); GPU machines
// build against pip torch 2.x with CUDA. Model and trainer code calls what is declared
// here instead of testing versions itself.
#pragma once

#include <torch/version.h>

#define TOPOTRAIN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||            \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace topotrain::compat {

// True when this build can run CUDA kernels (TOPOTRAIN_CUDA is defined by CMake exactly
// when the LibTorch found was built with CUDA).
constexpr bool kCudaBuild =
#ifdef TOPOTRAIN_CUDA
    true;
#else
    false;
#endif

}  // namespace topotrain::compat

// ---------------------------------------------------------------------------------------
// Model kernels (src/model). All are CUDA-only and differentiable in the versions named.
//
// TOPOTRAIN_HAS_FLASH_VARLEN: at::_flash_attention_forward takes packed [T, heads, dim]
//   tensors with cu_seqlens (FlashAttention-2 varlen, GQA without repeating k/v), accepts
//   `scale` and the window arguments from 2.5 on, and has an autograd formula.
// TOPOTRAIN_HAS_GROUPED_MM: at::_grouped_mm (2.8+) multiplies row groups of a 2-D matrix by
//   a stack of matrices in one launch (bf16, CUTLASS on sm90), with an autograd formula.
#if defined(TOPOTRAIN_CUDA) && TOPOTRAIN_TORCH_AT_LEAST(2, 5)
#define TOPOTRAIN_HAS_FLASH_VARLEN 1
#else
#define TOPOTRAIN_HAS_FLASH_VARLEN 0
#endif

#if defined(TOPOTRAIN_CUDA) && TOPOTRAIN_TORCH_AT_LEAST(2, 8)
#define TOPOTRAIN_HAS_GROUPED_MM 1
#else
#define TOPOTRAIN_HAS_GROUPED_MM 0
#endif

// TOPOTRAIN_HAS_CUDNN_ATTENTION: at::_scaled_dot_product_cudnn_attention(q, k, v, attn_bias,
//   compute_log_sumexp, dropout_p, is_causal, return_debug_mask, scale) on dense
//   [batch, heads, seq, dim] tensors of any strides, grouped k/v heads, with an autograd
//   formula (the attn_bias argument arrived in 2.5; 2.6 is the oldest checked).
#if defined(TOPOTRAIN_CUDA) && TOPOTRAIN_TORCH_AT_LEAST(2, 6)
#define TOPOTRAIN_HAS_CUDNN_ATTENTION 1
#else
#define TOPOTRAIN_HAS_CUDNN_ATTENTION 0
#endif

namespace topotrain::compat {
constexpr bool kHasFlashVarlen = TOPOTRAIN_HAS_FLASH_VARLEN;
constexpr bool kHasGroupedMm = TOPOTRAIN_HAS_GROUPED_MM;
constexpr bool kHasCudnnAttention = TOPOTRAIN_HAS_CUDNN_ATTENTION;
}  // namespace topotrain::compat

// ---- device memory and identity ---------------------------------------------------------
#include <optional>
#include <string>

#ifdef TOPOTRAIN_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace topotrain::compat {

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

// ---------------------------------------------------------------------------------------
// DFlash attention (src/model/dflash_attention.cpp).
//
// TOPOTRAIN_HAS_SDPA: at::scaled_dot_product_attention(q, k, v, attn_mask, dropout_p,
//   is_causal, scale) with a differentiable additive mask path (memory-efficient kernel on
//   CUDA); the `scale` argument arrived in 2.1.
#if TOPOTRAIN_TORCH_AT_LEAST(2, 1)
#define TOPOTRAIN_HAS_SDPA 1
#else
#define TOPOTRAIN_HAS_SDPA 0
#endif

namespace topotrain::compat {
constexpr bool kHasSdpa = TOPOTRAIN_HAS_SDPA;

// While it lives, scaled_dot_product_attention does not choose cuDNN's kernel. Recent torch
// prefers it on sm90 for attention with a mask, and cuDNN builds an execution plan for every
// new shape: about 9 ms of host time per call on an H200 (DFlash chunks of exact shapes, new
// with every batch, once cost a pipeline's drafter 90% of its step). Where shapes rarely
// repeat, the memory-efficient kernel, which plans nothing, is faster. The backward follows
// the forward's choice.
class WithoutCudnnAttention {
 public:
  WithoutCudnnAttention() {
#if TOPOTRAIN_TORCH_AT_LEAST(2, 4)
    enabled_ = at::globalContext().userEnabledCuDNNSDP();
    at::globalContext().setSDPUseCuDNN(false);
#endif
  }
  ~WithoutCudnnAttention() {
#if TOPOTRAIN_TORCH_AT_LEAST(2, 4)
    at::globalContext().setSDPUseCuDNN(enabled_);
#endif
  }
  WithoutCudnnAttention(const WithoutCudnnAttention&) = delete;
  WithoutCudnnAttention& operator=(const WithoutCudnnAttention&) = delete;

 private:
  bool enabled_ = false;
};
}  // namespace topotrain::compat

// ---- normalisation ---------------------------------------------------------------------
// RMSNorm in one fused kernel (forward and backward) where torch has one for CUDA (2.8+:
// at::rms_norm dispatches to _fused_rms_norm); it normalises in fp32 like the unfused path
// and rounds once at the end instead of before the weight. An unfused RMSNorm is about ten
// elementwise and reduction kernels per call, four calls per layer.
#if defined(TOPOTRAIN_CUDA) && TOPOTRAIN_TORCH_AT_LEAST(2, 8)
#define TOPOTRAIN_HAS_FUSED_RMS_NORM 1
#else
#define TOPOTRAIN_HAS_FUSED_RMS_NORM 0
#endif

namespace topotrain::compat {

// Returns false (and leaves `out` alone) where no fused kernel applies.
inline bool fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, at::Tensor& out) {
#if TOPOTRAIN_HAS_FUSED_RMS_NORM
  if (!x.is_cuda()) return false;
  out = at::rms_norm(x, {x.size(-1)}, weight.to(x.scalar_type()), eps);
  return true;
#else
  (void)x, (void)weight, (void)eps, (void)out;
  return false;
#endif
}

}  // namespace topotrain::compat

// ---- index selection -------------------------------------------------------------------
// at::nonzero_static (CUDA from 2.6) fills a result of a size the caller gives instead of
// reading the count back: at::nonzero waits for the device to learn how big its result is.
#if defined(TOPOTRAIN_CUDA) && TOPOTRAIN_TORCH_AT_LEAST(2, 6)
#define TOPOTRAIN_HAS_NONZERO_STATIC_CUDA 1
#else
#define TOPOTRAIN_HAS_NONZERO_STATIC_CUDA 0
#endif

namespace topotrain::compat {

// The indices of the true entries of a 1-D bool tensor, int64 [count], where the caller
// knows `count` on the host. On CUDA (where nonzero_static exists) the host is not held;
// elsewhere the count is checked, so that CPU runs catch a caller whose count is wrong
// (on CUDA a wrong count would pad with -1 or drop indices).
inline at::Tensor nonzero_of_count(const at::Tensor& mask, std::int64_t count) {
#if TOPOTRAIN_HAS_NONZERO_STATIC_CUDA
  if (mask.is_cuda()) return at::nonzero_static(mask, count, /*fill_value=*/-1).squeeze(1);
#endif
  at::Tensor rows = mask.nonzero().squeeze(1);
  if (rows.size(0) != count) {
    throw std::logic_error("nonzero_of_count: the mask has " + std::to_string(rows.size(0)) +
                           " true entries, the caller counted " + std::to_string(count));
  }
  return rows;
}

}  // namespace topotrain::compat

// ---- profiler --------------------------------------------------------------------------
// torch's profiler events report microseconds up to 1.13 and nanoseconds from 2.x on.
// Templates, so that only the profiling code includes the profiler's headers.
namespace topotrain::compat {

template <class KinetoEvent>
double profiler_event_start_us(const KinetoEvent& event) {
#if TOPOTRAIN_TORCH_AT_LEAST(2, 1)
  return static_cast<double>(event.startNs()) / 1e3;
#else
  return static_cast<double>(event.startUs());
#endif
}

template <class KinetoEvent>
double profiler_event_duration_us(const KinetoEvent& event) {
#if TOPOTRAIN_TORCH_AT_LEAST(2, 1)
  return static_cast<double>(event.durationNs()) / 1e3;
#else
  return static_cast<double>(event.durationUs());
#endif
}

}  // namespace topotrain::compat
