#include "topotrain/comm/backend.h"

#include <stdexcept>

#include "mpi_types.h"
#include "topotrain/comm/mpi_backend.h"
#include "topotrain/comm/nccl_backend.h"
#include "topotrain/core/error.h"

namespace topotrain::comm {

Backend::Backend(MPI_Comm group) {
  detail::mpi_check(MPI_Comm_dup(group, &control_), "MPI_Comm_dup");
  MPI_Comm_rank(control_, &rank_);
  MPI_Comm_size(control_, &size_);
}

Backend::~Backend() {
  if (control_ != MPI_COMM_NULL && detail::mpi_alive()) MPI_Comm_free(&control_);
}

void Backend::check_tensor(const at::Tensor& tensor, const char* operation) const {
  Device want = device();
  bool on_device = want.is_cpu ? tensor.is_cpu() : (tensor.is_cuda() && tensor.get_device() == want.index);
  if (!tensor.defined() || !on_device || !tensor.is_contiguous())
    throw std::invalid_argument(cat(name(), " ", operation, ": needs a contiguous tensor on ", want.str(),
                                    tensor.defined() ? cat(", got one on ", tensor.device()) : ", got none"));
}

std::unique_ptr<Backend> make_backend(MPI_Comm group, const Device& device) {
  if (device.is_cpu) return std::make_unique<MpiBackend>(group);
#ifdef TOPOTRAIN_CUDA
  return std::make_unique<NcclBackend>(group, device.index);
#else
  throw std::runtime_error(cat("cannot communicate on ", device.str(), ": this build has no CUDA"));
#endif
}

}  // namespace topotrain::comm
