// Backend over MPI for CPU tensors. MPI has no 16-bit float types: bf16 and fp16 tensors
// are reduced through an fp32 staging copy, so each element is summed in fp32 and rounded
// once.
#pragma once

#include "topotrain/comm/backend.h"

namespace topotrain::comm {

class MpiBackend final : public Backend {
 public:
  explicit MpiBackend(MPI_Comm group);
  ~MpiBackend() override;

  Device device() const override { return Device::cpu(); }
  const char* name() const override { return "mpi"; }
  std::unique_ptr<Work> all_reduce_async(const at::Tensor& tensor, ReduceOp op) override;
  void broadcast(const at::Tensor& tensor, int root) override;
  void send(const at::Tensor& tensor, int peer) override;
  void recv(const at::Tensor& tensor, int peer) override;
  void barrier() override;

 private:
  MPI_Comm data_ = MPI_COMM_NULL;  // tensor traffic, apart from control()
};

}  // namespace topotrain::comm
