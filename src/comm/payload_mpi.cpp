// Host-staged payloads: device tensors are copied to the host, sent with MPI and copied
// to the receiver's device.
#include <ATen/ATen.h>

#include <stdexcept>
#include <vector>

#include "cuda_handover.h"
#include "mpi_types.h"
#include "payload_channel.h"
#include "topotrain/comm/watchdog.h"

namespace topotrain::comm::detail {
namespace {

class MpiPayloadSender final : public PayloadSender {
 public:
  explicit MpiPayloadSender(MPI_Comm link) : link_(link) {}
  std::string stage(const at::Tensor&) override { return {}; }
  void transfer(const at::Tensor& hidden) override {
    at::Tensor host = hidden.to(at::kCPU).contiguous();
    for (MPI_Request& request : isend_bytes(host.data_ptr(), host.nbytes(), 0, kPayloadTag, link_))
      wait_request(&request, "MPI_Isend (hidden-state payload)");  // watched: the receiver may stop
  }
  void drain() override {}

 private:
  MPI_Comm link_;
};

class MpiIncomingPayload final : public IncomingPayload {
 public:
  MpiIncomingPayload(MPI_Comm link, Device device, int sender, const FrameFields& fields)
      : device_(device),
        host_(at::empty({fields.tokens, fields.columns}, static_cast<at::ScalarType>(fields.dtype))),
        requests_(irecv_bytes(host_.data_ptr(), host_.nbytes(), sender, kPayloadTag, link)) {}
  // A transfer still open when the link shuts down (the job is ending) is cancelled.
  ~MpiIncomingPayload() override {
    if (!mpi_alive()) return;
    for (MPI_Request& request : requests_) {
      if (request == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
  }
  bool arrived() override {
    int done = 0;
    mpi_check(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE),
              "MPI_Testall (hidden-state payload)");
    return done != 0;
  }
  ReceivedPayload take() override {
    if (device_.is_cpu) return {host_, {}};
#ifdef TOPOTRAIN_CUDA
    auto index = static_cast<c10::DeviceIndex>(device_.index);
    at::Tensor hidden = host_.to(at::Device(at::kCUDA, index));
    return {hidden, hand_over(hidden, c10::cuda::getCurrentCUDAStream(index))};
#else
    throw std::logic_error("hidden-state link: a CUDA receiver in a build without CUDA");
#endif
  }

 private:
  Device device_;
  at::Tensor host_;
  std::vector<MPI_Request> requests_;
};

class MpiPayloadReceiver final : public PayloadReceiver {
 public:
  MpiPayloadReceiver(MPI_Comm link, Device device) : link_(link), device_(device) {}
  std::unique_ptr<IncomingPayload> receive(int sender, const FrameFields& fields, const std::string&) override {
    return std::make_unique<MpiIncomingPayload>(link_, device_, sender, fields);
  }

 private:
  MPI_Comm link_;
  Device device_;
};

}  // namespace

std::unique_ptr<PayloadSender> make_mpi_payload_sender(const PayloadSetup& setup) {
  return std::make_unique<MpiPayloadSender>(setup.link);
}

std::unique_ptr<PayloadReceiver> make_mpi_payload_receiver(const PayloadSetup& setup) {
  return std::make_unique<MpiPayloadReceiver>(setup.link, setup.device);
}

}  // namespace topotrain::comm::detail
