// Payloads over NCCL point-to-point: one 2-rank communicator per (sender, receiver)
// pair, so that a sender and its receiver may share a GPU with other links' ranks.
#include "payload_channel.h"

#ifdef TOPOTRAIN_CUDA

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <nccl.h>

#include <vector>

#include "cuda_handover.h"
#include "mpi_types.h"
#include "topotrain/comm/nccl_backend.h"

namespace topotrain::comm::detail {
namespace {

c10::DeviceIndex device_index(const Device& device) { return static_cast<c10::DeviceIndex>(device.index); }

// In the pair communicator the sender is rank 0 and the receiver rank 1. The receiver
// joins its senders' communicators one after another, in link-rank order.
ncclComm_t join_pair(MPI_Comm link, int sender, bool is_sender) {
  ncclUniqueId id;
  if (is_sender) {
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    mpi_check(MPI_Send(&id, sizeof(id), MPI_BYTE, 0, kSetupTag, link), "MPI_Send (NCCL unique id)");
  } else {
    mpi_check(MPI_Recv(&id, sizeof(id), MPI_BYTE, sender, kSetupTag, link, MPI_STATUS_IGNORE),
              "MPI_Recv (NCCL unique id)");
  }
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRank(&comm, 2, id, is_sender ? 0 : 1), "ncclCommInitRank (hidden-state link)");
  return comm;
}

class NcclPayloadSender final : public PayloadSender {
 public:
  explicit NcclPayloadSender(const PayloadSetup& setup)
      : device_(device_index(setup.device)), stream_(c10::cuda::getStreamFromPool(false, device_)) {
    c10::cuda::CUDAGuard guard(device_);
    int rank = 0;
    MPI_Comm_rank(setup.link, &rank);
    comm_ = join_pair(setup.link, rank, true);
  }
  ~NcclPayloadSender() override {
    stream_.synchronize();
    ncclCommDestroy(comm_);
  }
  std::string stage(const at::Tensor&) override { return {}; }
  void transfer(const at::Tensor& hidden) override {
    c10::cuda::CUDAGuard guard(device_);
    at::cuda::CUDAEvent produced;
    produced.record(c10::cuda::getCurrentCUDAStream(device_));
    produced.block(stream_);
    nccl_check(ncclSend(hidden.data_ptr(), hidden.nbytes(), ncclUint8, 1, comm_, stream_.stream()), "ncclSend");
    c10::cuda::CUDACachingAllocator::recordStream(hidden.storage().data_ptr(), stream_);
  }
  void drain() override { stream_.synchronize(); }

 private:
  c10::DeviceIndex device_;
  c10::cuda::CUDAStream stream_;
  ncclComm_t comm_ = nullptr;
};

// Done once the receive, queued on its sender's stream, has completed on the GPU.
class NcclIncomingPayload final : public IncomingPayload {
 public:
  NcclIncomingPayload(at::Tensor hidden, c10::cuda::CUDAStream stream) : hidden_(std::move(hidden)), stream_(stream) {
    received_.record(stream_);
  }
  bool arrived() override { return received_.query(); }
  ReceivedPayload take() override { return {hidden_, hand_over(hidden_, stream_)}; }

 private:
  at::Tensor hidden_;
  c10::cuda::CUDAStream stream_;
  at::cuda::CUDAEvent received_;
};

class NcclPayloadReceiver final : public PayloadReceiver {
 public:
  explicit NcclPayloadReceiver(const PayloadSetup& setup) : device_(device_index(setup.device)) {
    c10::cuda::CUDAGuard guard(device_);
    int size = 0;
    MPI_Comm_size(setup.link, &size);
    comms_.assign(size, nullptr);
    // A stream per sender: a receive waiting on the GPU for a sender that has not sent
    // yet must not hold up the others' receives queued behind it.
    streams_.push_back(c10::cuda::getCurrentCUDAStream(device_));  // [0] unused
    for (int sender = 1; sender < size; ++sender) {
      comms_[sender] = join_pair(setup.link, sender, false);
      streams_.push_back(c10::cuda::getStreamFromPool(false, device_));
    }
  }
  ~NcclPayloadReceiver() override {
    for (std::size_t sender = 1; sender < streams_.size(); ++sender) streams_[sender].synchronize();
    for (ncclComm_t comm : comms_)
      if (comm) ncclCommDestroy(comm);
  }
  std::unique_ptr<IncomingPayload> receive(int sender, const FrameFields& fields, const std::string&) override {
    c10::cuda::CUDAGuard guard(device_);
    c10::cuda::CUDAStream stream = streams_[static_cast<std::size_t>(sender)];
    // Allocated while the receive stream is current, so the caching allocator ties the
    // block to it; hand_over adds the consumer's stream.
    c10::cuda::CUDAStreamGuard on_stream(stream);
    at::Tensor hidden = at::empty({fields.tokens, fields.columns},
                                  at::TensorOptions(static_cast<at::ScalarType>(fields.dtype)).device(at::kCUDA, device_));
    nccl_check(ncclRecv(hidden.data_ptr(), hidden.nbytes(), ncclUint8, 0, comms_[sender], stream.stream()), "ncclRecv");
    return std::make_unique<NcclIncomingPayload>(std::move(hidden), stream);
  }

 private:
  c10::DeviceIndex device_;
  std::vector<ncclComm_t> comms_;                // by link rank; [0] unused
  std::vector<c10::cuda::CUDAStream> streams_;  // by link rank; [0] unused
};

}  // namespace

std::unique_ptr<PayloadSender> make_nccl_payload_sender(const PayloadSetup& setup) {
  return std::make_unique<NcclPayloadSender>(setup);
}

std::unique_ptr<PayloadReceiver> make_nccl_payload_receiver(const PayloadSetup& setup) {
  return std::make_unique<NcclPayloadReceiver>(setup);
}

}  // namespace topotrain::comm::detail

#endif  // TOPOTRAIN_CUDA
