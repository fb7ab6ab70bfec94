#include "topotrain/comm/nccl_backend.h"

#ifdef TOPOTRAIN_CUDA

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <optional>
#include <stdexcept>
#include <utility>

#include "mpi_types.h"
#include "topotrain/core/error.h"

namespace topotrain::comm {

void nccl_check(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return;
  throw std::runtime_error(cat(call, " failed: ", ncclGetErrorString(result), " (", ncclGetLastError(nullptr), ")"));
}

ncclDataType_t nccl_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    default: throw std::invalid_argument(cat("NCCL cannot move tensors of type ", c10::toString(type)));
  }
}

namespace {

// Completion of an operation on the comm stream: waiting orders the waiter's current
// stream after the event, on the device.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<at::cuda::CUDAEvent> done, std::optional<DeviceSpan> span)
      : done_(std::move(done)), span_(std::move(span)) {}
  void wait() override { done_->block(c10::cuda::getCurrentCUDAStream(done_->device_index())); }
  std::optional<DeviceSpan> take_device_span() override { return std::exchange(span_, std::nullopt); }

 private:
  std::shared_ptr<at::cuda::CUDAEvent> done_;
  std::optional<DeviceSpan> span_;
};

}  // namespace

NcclBackend::NcclBackend(MPI_Comm group, int cuda_device) : Backend(group), device_(cuda_device) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  ncclUniqueId id;
  if (rank() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  detail::mpi_check(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, control()), "MPI_Bcast (NCCL unique id)");
  nccl_check(ncclCommInitRank(&comm_, size(), id, rank()), "ncclCommInitRank");
  stream_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, static_cast<c10::DeviceIndex>(device_));
}

NcclBackend::~NcclBackend() {
  // Outstanding operations belong to the comm stream: let them finish before the
  // communicator goes (ncclCommDestroy does not wait for them).
  if (stream_) cudaStreamSynchronize(stream_->stream());
  if (comm_) ncclCommDestroy(comm_);
}

template <typename Enqueue>
std::unique_ptr<Work> NcclBackend::on_comm_stream(const at::Tensor& tensor, bool timed, Enqueue enqueue) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
  at::cuda::CUDAEvent inputs_ready;
  inputs_ready.record(current);
  inputs_ready.block(*stream_);
  // Begins after the wait for the inputs: the span is the collective's own time.
  std::optional<DeviceSpan> span;
  if (timed) span.emplace(stream_->stream());
  enqueue(stream_->stream());
  if (span) span->close();
  // The caching allocator may hand the memory to another tensor once the caller drops
  // this one; tell it the comm stream still uses it.
  c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), *stream_);
  auto done = std::make_shared<at::cuda::CUDAEvent>();
  done->record(*stream_);
  return std::make_unique<NcclWork>(std::move(done), std::move(span));
}

std::unique_ptr<Work> NcclBackend::all_reduce_async(const at::Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce");
  return on_comm_stream(tensor, timing_collectives(), [&](cudaStream_t stream) {
    nccl_check(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()),
                             op == ReduceOp::sum ? ncclSum : ncclAvg, comm_, stream),
               "ncclAllReduce");
  });
}

void NcclBackend::broadcast(const at::Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  on_comm_stream(tensor, false, [&](cudaStream_t stream) {
    nccl_check(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()),
                             root, comm_, stream),
               "ncclBroadcast");
  })->wait();
}

void NcclBackend::send(const at::Tensor& tensor, int peer) {
  check_tensor(tensor, "send");
  on_comm_stream(tensor, false, [&](cudaStream_t stream) {
    nccl_check(ncclSend(tensor.data_ptr(), tensor.nbytes(), ncclUint8, peer, comm_, stream), "ncclSend");
  })->wait();
}

void NcclBackend::recv(const at::Tensor& tensor, int peer) {
  check_tensor(tensor, "recv");
  on_comm_stream(tensor, false, [&](cudaStream_t stream) {
    nccl_check(ncclRecv(tensor.data_ptr(), tensor.nbytes(), ncclUint8, peer, comm_, stream), "ncclRecv");
  })->wait();
}

void NcclBackend::barrier() {
  // Work queued before the barrier must be finished on every rank when it returns.
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).synchronize();
  stream_->synchronize();
  detail::mpi_check(MPI_Barrier(control()), "MPI_Barrier");
}

}  // namespace topotrain::comm

#endif  // TOPOTRAIN_CUDA
