// How one transport moves a batch's payload tensor (internal header). The header frame
// always goes over MPI; these move [tokens, columns] of payload between the sender and
// the receiver, whose link ranks are 1..N and 0.
#pragma once

#include <mpi.h>

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>

#include "link_frame.h"
#include "topotrain/comm/hidden_state_link.h"

namespace topotrain::comm::detail {

class PayloadSender {
 public:
  virtual ~PayloadSender() = default;
  // Before the header goes out; may block for a free slot. Returns the bytes the header
  // frame carries for the receiver (IPC: slot and handles).
  virtual std::string stage(const at::Tensor& hidden) = 0;
  // After the receiver has taken the header.
  virtual void transfer(const at::Tensor& hidden) = 0;
  // After the close frame: waits until the receiver no longer reads this sender's memory.
  virtual void drain() = 0;
};

struct ReceivedPayload {
  at::Tensor hidden;
  std::function<void()> before_use;  // run by the consumer: orders its stream after the copy
};

// A payload on its way. Nothing here waits for the sender: the receiving thread polls every
// sender's incoming payload in turn, so one that stalls holds up only its own stream.
class IncomingPayload {
 public:
  virtual ~IncomingPayload() = default;
  // Polled on the receiving thread; true once the payload may be handed to the consumer.
  virtual bool arrived() = 0;
  // Once arrived(): the tensor, and what orders the consumer's stream after the copy.
  virtual ReceivedPayload take() = 0;
};

class PayloadReceiver {
 public:
  virtual ~PayloadReceiver() = default;
  // On the receiving thread, right after the header frame of `sender` (a link rank):
  // starts the transfer and returns without waiting for it.
  virtual std::unique_ptr<IncomingPayload> receive(int sender, const FrameFields& fields, const std::string& extra) = 0;
};

// What an IPC ring slot allocates for a payload of `bytes`: headroom, since token counts
// vary from batch to batch and a slot that grows is reallocated.
constexpr std::size_t ipc_slot_capacity(std::size_t bytes) { return bytes + bytes / 4; }

struct PayloadSetup {
  MPI_Comm link;        // receiver is rank 0, senders 1..N
  Device device;
  int ipc_slots;
};

// Collective over the link like the endpoints' constructors.
std::unique_ptr<PayloadSender> make_mpi_payload_sender(const PayloadSetup& setup);
std::unique_ptr<PayloadReceiver> make_mpi_payload_receiver(const PayloadSetup& setup);
#ifdef TOPOTRAIN_CUDA
std::unique_ptr<PayloadSender> make_nccl_payload_sender(const PayloadSetup& setup);
std::unique_ptr<PayloadReceiver> make_nccl_payload_receiver(const PayloadSetup& setup);
std::unique_ptr<PayloadSender> make_ipc_payload_sender(const PayloadSetup& setup);
std::unique_ptr<PayloadReceiver> make_ipc_payload_receiver(const PayloadSetup& setup);
#endif

}  // namespace topotrain::comm::detail
