// Payloads through CUDA IPC on one node. Each sender owns a ring of cudaMalloc'd slots
// (the IPC API shares whole cudaMalloc allocations, not caching-allocator blocks) with
// one interprocess event each. Sending copies the payload into the next free slot and
// records the slot's event; the header carries the slot index, plus the slot's handles
// the first time and whenever the slot grew. The receiver maps each slot once, copies
// out after the event, and returns the slot as a credit over MPI.
//
// Invariant: a sender writes a slot only while it holds its credit, and the receiver
// returns the credit only after its copy out of the slot has completed.
#include "payload_channel.h"

#ifdef TOPOTRAIN_CUDA

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <deque>
#include <vector>

#include "cuda_handover.h"
#include "mpi_types.h"
#include "topotrain/comm/watchdog.h"
#include "topotrain/core/error.h"

namespace topotrain::comm::detail {
namespace {

void cuda_check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw std::runtime_error(cat(call, " failed: ", cudaGetErrorString(status)));
}

c10::DeviceIndex device_index(const Device& device) { return static_cast<c10::DeviceIndex>(device.index); }

// What the header frame carries for the receiver.
struct SlotNotice {
  std::int32_t slot = 0;
  std::int32_t new_memory = 0;  // memory handle follows: the slot is new or grew
  std::int32_t new_event = 0;   // event handle follows: first use of the slot
  cudaIpcMemHandle_t memory;
  cudaIpcEventHandle_t event;
};

class IpcPayloadSender final : public PayloadSender {
 public:
  explicit IpcPayloadSender(const PayloadSetup& setup)
      : link_(setup.link), device_(device_index(setup.device)), stream_(c10::cuda::getStreamFromPool(false, device_)) {
    if (setup.ipc_slots < 1) throw std::invalid_argument("hidden-state link: ipc_slots must be at least 1");
    slots_.resize(setup.ipc_slots);
  }
  ~IpcPayloadSender() override {
    c10::cuda::CUDAGuard guard(device_);
    stream_.synchronize();
    for (Slot& slot : slots_) {
      if (slot.memory) cudaFree(slot.memory);
      if (slot.event) cudaEventDestroy(slot.event);
    }
  }

  std::string stage(const at::Tensor& hidden) override {
    c10::cuda::CUDAGuard guard(device_);
    if (in_flight_.size() == slots_.size()) take_credit();
    std::int32_t index = next_;
    next_ = (next_ + 1) % static_cast<std::int32_t>(slots_.size());
    Slot& slot = slots_[index];
    SlotNotice notice;
    notice.slot = index;
    std::size_t bytes = hidden.nbytes();
    if (slot.capacity < bytes) {
      // The receiver holds no mapping in use: we own this slot's credit.
      if (slot.memory) cuda_check(cudaFree(slot.memory), "cudaFree (IPC slot)");
      slot.capacity = ipc_slot_capacity(bytes);
      cuda_check(cudaMalloc(&slot.memory, slot.capacity), "cudaMalloc (IPC slot)");
      cuda_check(cudaIpcGetMemHandle(&notice.memory, slot.memory), "cudaIpcGetMemHandle");
      notice.new_memory = 1;
    }
    if (!slot.event) {
      cuda_check(cudaEventCreateWithFlags(&slot.event, cudaEventDisableTiming | cudaEventInterprocess),
                 "cudaEventCreateWithFlags (IPC)");
      cuda_check(cudaIpcGetEventHandle(&notice.event, slot.event), "cudaIpcGetEventHandle");
      notice.new_event = 1;
    }
    at::cuda::CUDAEvent produced;
    produced.record(c10::cuda::getCurrentCUDAStream(device_));
    produced.block(stream_);
    cuda_check(cudaMemcpyAsync(slot.memory, hidden.data_ptr(), bytes, cudaMemcpyDeviceToDevice, stream_.stream()),
               "cudaMemcpyAsync (into IPC slot)");
    cuda_check(cudaEventRecord(slot.event, stream_.stream()), "cudaEventRecord (IPC slot)");
    c10::cuda::CUDACachingAllocator::recordStream(hidden.storage().data_ptr(), stream_);
    in_flight_.push_back(index);
    return std::string(reinterpret_cast<const char*>(&notice), sizeof(notice));
  }
  void transfer(const at::Tensor&) override {}
  // The receiver may still copy out of our slots: freeing them before every credit is
  // back would pull memory out from under it.
  void drain() override {
    while (!in_flight_.empty()) take_credit();
  }

 private:
  struct Slot {
    void* memory = nullptr;
    std::size_t capacity = 0;
    cudaEvent_t event = nullptr;
  };
  // Credits come back in the order the slots were sent: one receiving thread handles
  // this sender's frames in order.
  void take_credit() {
    std::int32_t slot = -1;
    MPI_Request request = MPI_REQUEST_NULL;
    mpi_check(MPI_Irecv(&slot, 1, MPI_INT32_T, 0, kCreditTag, link_, &request), "MPI_Irecv (IPC credit)");
    wait_request(&request, "MPI_Irecv (IPC credit)");  // watched: the receiver may stop
    if (in_flight_.empty() || slot != in_flight_.front())
      throw std::runtime_error(cat("hidden-state link: IPC credit for slot ", slot, " out of order"));
    in_flight_.pop_front();
  }

  MPI_Comm link_;
  c10::DeviceIndex device_;
  c10::cuda::CUDAStream stream_;
  std::vector<Slot> slots_;
  std::deque<std::int32_t> in_flight_;  // slots the receiver has not returned yet
  std::int32_t next_ = 0;
};

// Done once the copy out of the slot has completed; only then does the slot's credit go
// back, so the sender never overwrites a slot still being read.
class IpcIncomingPayload final : public IncomingPayload {
 public:
  IpcIncomingPayload(at::Tensor hidden, c10::cuda::CUDAStream stream, MPI_Comm link, int sender, std::int32_t slot)
      : hidden_(std::move(hidden)), stream_(stream), link_(link), sender_(sender), slot_(slot) {
    copied_.record(stream_);
  }
  bool arrived() override {
    if (!credited_ && copied_.query()) {
      mpi_check(MPI_Send(&slot_, 1, MPI_INT32_T, sender_, kCreditTag, link_), "MPI_Send (IPC credit)");
      credited_ = true;
    }
    return credited_;
  }
  ReceivedPayload take() override { return {hidden_, hand_over(hidden_, stream_)}; }

 private:
  at::Tensor hidden_;
  c10::cuda::CUDAStream stream_;
  at::cuda::CUDAEvent copied_;
  MPI_Comm link_;
  int sender_;
  std::int32_t slot_;
  bool credited_ = false;
};

class IpcPayloadReceiver final : public PayloadReceiver {
 public:
  explicit IpcPayloadReceiver(const PayloadSetup& setup) : link_(setup.link), device_(device_index(setup.device)) {
    int size = 0;
    MPI_Comm_size(link_, &size);
    mapped_.resize(size);
    // A stream per sender: a copy waiting on the GPU for a sender's slot event must not
    // hold up the copies of the others queued behind it.
    for (int sender = 0; sender < size; ++sender) streams_.push_back(c10::cuda::getStreamFromPool(false, device_));
  }
  ~IpcPayloadReceiver() override {
    c10::cuda::CUDAGuard guard(device_);
    for (c10::cuda::CUDAStream& stream : streams_) stream.synchronize();
    for (auto& slots : mapped_)
      for (Mapped& slot : slots) {
        if (slot.memory) cudaIpcCloseMemHandle(slot.memory);
        if (slot.event) cudaEventDestroy(slot.event);
      }
  }

  std::unique_ptr<IncomingPayload> receive(int sender, const FrameFields& fields, const std::string& extra) override {
    c10::cuda::CUDAGuard guard(device_);
    SlotNotice notice;
    if (extra.size() != sizeof(notice)) throw std::runtime_error("hidden-state link: malformed IPC slot notice");
    std::memcpy(&notice, extra.data(), sizeof(notice));
    auto& slots = mapped_[sender];
    if (notice.slot < 0 || notice.slot > 1024) throw std::runtime_error("hidden-state link: IPC slot index out of range");
    if (static_cast<std::size_t>(notice.slot) >= slots.size()) slots.resize(notice.slot + 1);
    Mapped& slot = slots[notice.slot];
    if (notice.new_memory) {
      if (slot.memory) cuda_check(cudaIpcCloseMemHandle(slot.memory), "cudaIpcCloseMemHandle");
      cuda_check(cudaIpcOpenMemHandle(&slot.memory, notice.memory, cudaIpcMemLazyEnablePeerAccess),
                 "cudaIpcOpenMemHandle");
    }
    if (notice.new_event) cuda_check(cudaIpcOpenEventHandle(&slot.event, notice.event), "cudaIpcOpenEventHandle");
    if (!slot.memory || !slot.event) throw std::runtime_error("hidden-state link: IPC slot used before it was shared");

    c10::cuda::CUDAStream stream = streams_[static_cast<std::size_t>(sender)];
    c10::cuda::CUDAStreamGuard on_stream(stream);
    at::Tensor hidden = at::empty({fields.tokens, fields.columns},
                                  at::TensorOptions(static_cast<at::ScalarType>(fields.dtype)).device(at::kCUDA, device_));
    cuda_check(cudaStreamWaitEvent(stream.stream(), slot.event, 0), "cudaStreamWaitEvent (IPC slot)");
    cuda_check(cudaMemcpyAsync(hidden.data_ptr(), slot.memory, hidden.nbytes(), cudaMemcpyDeviceToDevice, stream.stream()),
               "cudaMemcpyAsync (out of IPC slot)");
    return std::make_unique<IpcIncomingPayload>(std::move(hidden), stream, link_, sender, notice.slot);
  }

 private:
  struct Mapped {
    void* memory = nullptr;
    cudaEvent_t event = nullptr;
  };
  MPI_Comm link_;
  c10::DeviceIndex device_;
  std::vector<c10::cuda::CUDAStream> streams_;  // by link rank; [0] unused
  std::vector<std::vector<Mapped>> mapped_;     // by link rank, then slot
};

}  // namespace

std::unique_ptr<PayloadSender> make_ipc_payload_sender(const PayloadSetup& setup) {
  return std::make_unique<IpcPayloadSender>(setup);
}

std::unique_ptr<PayloadReceiver> make_ipc_payload_receiver(const PayloadSetup& setup) {
  return std::make_unique<IpcPayloadReceiver>(setup);
}

}  // namespace topotrain::comm::detail

#endif  // TOPOTRAIN_CUDA
