// Backend over NCCL for CUDA tensors (CUDA builds only).
//
// Every operation runs on the backend's own communication stream, which first waits for
// an event recorded on the caller's current stream; completion is another event that the
// caller's stream waits on. The host never synchronises on the hot path, and the caching
// allocator is told (recordStream) that the comm stream uses the tensor. With
// time_collectives on, each all-reduce is bracketed by two more events on the comm stream.
#pragma once

#ifdef TOPOTRAIN_CUDA

#include <nccl.h>

#include <c10/cuda/CUDAStream.h>

#include "topotrain/comm/backend.h"

namespace topotrain::comm {

// Throws std::runtime_error naming the call and NCCL's reason when `result` is an error.
void nccl_check(ncclResult_t result, const char* call);
// The NCCL type of a tensor's dtype; throws for types NCCL lacks.
ncclDataType_t nccl_type(at::ScalarType type);

class NcclBackend final : public Backend {
 public:
  // Collective over `group`: rank 0 creates the unique id and broadcasts it over MPI.
  NcclBackend(MPI_Comm group, int cuda_device);
  ~NcclBackend() override;

  Device device() const override { return Device::cuda(device_); }
  const char* name() const override { return "nccl"; }
  std::unique_ptr<Work> all_reduce_async(const at::Tensor& tensor, ReduceOp op) override;
  void broadcast(const at::Tensor& tensor, int root) override;
  void send(const at::Tensor& tensor, int peer) override;
  void recv(const at::Tensor& tensor, int peer) override;
  void barrier() override;

 private:
  // Runs `enqueue` on the comm stream ordered after the current stream, and returns the
  // work whose wait() orders the current stream after it (`timed`: and its device span).
  template <typename Enqueue>
  std::unique_ptr<Work> on_comm_stream(const at::Tensor& tensor, bool timed, Enqueue enqueue);

  int device_;
  ncclComm_t comm_ = nullptr;
  c10::optional<c10::cuda::CUDAStream> stream_;
};

}  // namespace topotrain::comm

#endif  // TOPOTRAIN_CUDA
