// Host-staged payloads: device tensors are copied to the host, sent with MPI and copied
// to the receiver's device.
#include <ATen/ATen.h>

#include <stdexcept>

#include "cuda_handover.h"
#include "mpi_types.h"
#include "payload_channel.h"

namespace topotrain::comm::detail {
namespace {

class MpiPayloadSender final : public PayloadSender {
 public:
  explicit MpiPayloadSender(MPI_Comm link) : link_(link) {}
  std::string stage(const at::Tensor&) override { return {}; }
  void transfer(const at::Tensor& hidden) override {
    at::Tensor host = hidden.to(at::kCPU).contiguous();
    send_bytes(host.data_ptr(), host.nbytes(), 0, kPayloadTag, link_);
  }
  void drain() override {}

 private:
  MPI_Comm link_;
};

class MpiPayloadReceiver final : public PayloadReceiver {
 public:
  MpiPayloadReceiver(MPI_Comm link, Device device) : link_(link), device_(device) {}
  ReceivedPayload receive(int sender, const FrameFields& fields, const std::string&) override {
    at::Tensor host = at::empty({fields.tokens, fields.columns}, static_cast<at::ScalarType>(fields.dtype));
    recv_bytes(host.data_ptr(), host.nbytes(), sender, kPayloadTag, link_);
    if (device_.is_cpu) return {host, {}};
#ifdef TOPOTRAIN_CUDA
    auto index = static_cast<c10::DeviceIndex>(device_.index);
    at::Tensor hidden = host.to(at::Device(at::kCUDA, index));
    return {hidden, hand_over(hidden, c10::cuda::getCurrentCUDAStream(index))};
#else
    throw std::logic_error("hidden-state link: a CUDA receiver in a build without CUDA");
#endif
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
