#include "topotrain/core/device_span.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace topotrain {

#ifdef TOPOTRAIN_CUDA
namespace {

void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string("device span: ") + what + ": " + cudaGetErrorString(status));
}

}  // namespace

DeviceSpan::DeviceSpan(cudaStream_t stream) : stream_(stream) {
  cuda_check(cudaEventCreate(&begin_), "cudaEventCreate");
  try {
    cuda_check(cudaEventCreate(&end_), "cudaEventCreate");
    cuda_check(cudaEventRecord(begin_, stream_), "cudaEventRecord");
  } catch (...) {
    cudaEventDestroy(begin_);
    if (end_) cudaEventDestroy(end_);
    throw;
  }
}

DeviceSpan::~DeviceSpan() {
  // Destroying an event whose work is still queued is allowed: CUDA frees it once done.
  if (begin_) cudaEventDestroy(begin_);
  if (end_) cudaEventDestroy(end_);
}

DeviceSpan::DeviceSpan(DeviceSpan&& other) noexcept
    : stream_(other.stream_), begin_(std::exchange(other.begin_, nullptr)), end_(std::exchange(other.end_, nullptr)) {}

DeviceSpan& DeviceSpan::operator=(DeviceSpan&& other) noexcept {
  if (this != &other) {
    std::swap(stream_, other.stream_);
    std::swap(begin_, other.begin_);
    std::swap(end_, other.end_);
  }
  return *this;
}

void DeviceSpan::close() { cuda_check(cudaEventRecord(end_, stream_), "cudaEventRecord"); }

#else

DeviceSpan::~DeviceSpan() = default;
DeviceSpan::DeviceSpan(DeviceSpan&& other) noexcept = default;
DeviceSpan& DeviceSpan::operator=(DeviceSpan&& other) noexcept = default;
void DeviceSpan::close() { end_ = Clock::now(); }

#endif

}  // namespace topotrain
