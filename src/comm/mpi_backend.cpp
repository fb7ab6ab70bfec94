#include "topotrain/comm/mpi_backend.h"

#include <ATen/ATen.h>

#include <climits>
#include <stdexcept>

#include "mpi_types.h"
#include "topotrain/comm/watchdog.h"
#include "topotrain/core/error.h"

namespace topotrain::comm {
namespace {

bool is_half_float(at::ScalarType type) { return type == at::kBFloat16 || type == at::kHalf; }

// A non-blocking all-reduce. MPI progresses it inside MPI calls, at the latest in wait(),
// which sleeps between tests (and is watched: watchdog.h) rather than spinning.
class MpiWork final : public Work {
 public:
  MpiWork(at::Tensor target, at::Tensor staging, ReduceOp op, int group_size)
      : target_(std::move(target)), staging_(std::move(staging)), op_(op), group_size_(group_size) {}
  ~MpiWork() override {
    // The request writes into our buffers: never release them while it is in flight.
    if (request_ != MPI_REQUEST_NULL && detail::mpi_alive()) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  MPI_Request* request() { return &request_; }
  const at::Tensor& buffer() const { return staging_.defined() ? staging_ : target_; }

  void wait() override {
    if (done_) return;
    wait_request(&request_, "MPI_Test (all_reduce)");
    done_ = true;
    if (op_ == ReduceOp::avg) buffer().div_(group_size_);
    if (staging_.defined()) target_.copy_(staging_);
  }

 private:
  at::Tensor target_;
  at::Tensor staging_;  // fp32 copy of a 16-bit float tensor, or undefined
  ReduceOp op_;
  int group_size_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

}  // namespace

MpiBackend::MpiBackend(MPI_Comm group) : Backend(group) {
  detail::mpi_check(MPI_Comm_dup(group, &data_), "MPI_Comm_dup");
}

MpiBackend::~MpiBackend() {
  if (data_ != MPI_COMM_NULL && detail::mpi_alive()) MPI_Comm_free(&data_);
}

std::unique_ptr<Work> MpiBackend::all_reduce_async(const at::Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce");
  if (op == ReduceOp::avg && !at::isFloatingType(tensor.scalar_type()))
    throw std::invalid_argument(cat("mpi all_reduce: avg of ", tensor.scalar_type(), " tensors is not defined; use sum"));
  at::Tensor staging;
  if (is_half_float(tensor.scalar_type())) staging = tensor.to(at::kFloat);
  auto work = std::make_unique<MpiWork>(tensor, staging, op, size());
  const at::Tensor& buffer = work->buffer();
  if (buffer.numel() > INT_MAX)
    throw std::invalid_argument(cat("mpi all_reduce: ", buffer.numel(), " elements exceed MPI's int count"));
  detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr(), static_cast<int>(buffer.numel()),
                                   detail::mpi_type(buffer.scalar_type()), MPI_SUM, data_, work->request()),
                    "MPI_Iallreduce");
  return work;
}

void MpiBackend::broadcast(const at::Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  std::size_t bytes = tensor.nbytes();
  if (bytes > INT_MAX) throw std::invalid_argument("mpi broadcast: tensors over 2 GiB are not supported");
  detail::mpi_check(MPI_Bcast(tensor.data_ptr(), static_cast<int>(bytes), MPI_BYTE, root, data_), "MPI_Bcast");
}

void MpiBackend::send(const at::Tensor& tensor, int peer) {
  check_tensor(tensor, "send");
  detail::send_bytes(tensor.data_ptr(), tensor.nbytes(), peer, 0, data_);
}

void MpiBackend::recv(const at::Tensor& tensor, int peer) {
  check_tensor(tensor, "recv");
  detail::recv_bytes(tensor.data_ptr(), tensor.nbytes(), peer, 0, data_);
}

void MpiBackend::barrier() { detail::mpi_check(MPI_Barrier(data_), "MPI_Barrier"); }

}  // namespace topotrain::comm
