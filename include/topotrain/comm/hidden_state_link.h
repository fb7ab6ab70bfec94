// The hidden-state link: target ranks stream packed batches of captured hidden states
// to a drafter rank (fan-in N -> 1), with back-pressure and a clean end of stream.
//
// A batch is a small header, every tensor field of its PackedBatch (kPackedBatchFields, in
// their dtypes), which always travels over MPI, and one payload tensor [tokens, taps * hidden]
// (bf16; fp32 allowed on CPU), which travels by the link's transport:
//   mpi   host-staged through MPI (CPU runs; works everywhere)
//   nccl  ncclSend/ncclRecv over one 2-rank communicator per (target, drafter) pair
//   ipc   same node: each sender owns a ring of cudaMalloc'd slots that the receiver
//         maps once (cudaIpcOpenMemHandle) and copies out of; a credit returned over MPI
//         frees a slot, so a sender never overwrites one the receiver has not read
//   auto  ipc when every end of the link is on one node with CUDA, nccl across nodes,
//         mpi on CPU
//
// Back-pressure: the receiver holds at most max(1, queue_depth / senders) batches of each
// sender (one whose payload is on its way counts); a sender's send() blocks while its share
// is full — nothing is dropped, and a fast sender cannot crowd a slow one out of the queue.
// Nor can a slow one hold the others up: the receiving thread starts a payload's transfer
// and goes on polling, so a sender that stalls between its header and its payload (stopped,
// or waiting for its GPU) delays only its own stream; a batch is queued once its payload
// has arrived.
// Every sender ends its stream with close(); the receiver's next() returns nullopt once
// every sender has closed. A sender that fails calls fail(reason) and the receiver's
// next() throws with the reason; an exception on the receiver ends the job through the
// job runner (MPI_Abort), which takes the blocked senders down with it.
//
// Stopping early without losing anything: the receiver calls request_stop(), keeps
// calling next() (discarding what arrives) until it returns nullopt; each sender sees
// stop_requested() before its next send and closes. Every sender receives exactly one stop
// (request_stop's, or the receiver's answer to its close, which close() waits for), so no
// message of a link outlives it; a sender that failed is sent none. A sender that must stop the whole
// pipeline (it ran out of memory) closes with a reason, which the receiver sees in
// early_close_reason(). Batches discarded this way were never trained on: a checkpoint
// that records the cursors of trained batches only resumes without skipping any.
#pragma once

#include <mpi.h>

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "topotrain/batch/packed_batch.h"
#include "topotrain/core/topology.h"

namespace topotrain::comm {

struct PackedHiddenBatch {
  // Every tensor field set, loss_mask and sample_ids included; the sender's may live anywhere,
  // the receiver's arrive on the CPU with their host fields summarized (PackedBatch::summarize).
  PackedBatch packed;
  at::Tensor hidden;  // bf16 (fp32 on CPU) [tokens, taps * hidden], on the rank's device
  // int64 [n] or undefined: the sender's own bookkeeping (dflash_train: where the sender's
  // data stream stands after this batch), delivered with the batch and never interpreted.
  at::Tensor cursor;
  int sender = -1;  // set by the receiver: the sending rank, in the communicator the link was built over

  std::int64_t tokens() const { return hidden.size(0); }
};

// The ranks of one link, as ranks of the communicator the endpoints are built over.
struct LinkEnds {
  int receiver = 0;
  std::vector<int> senders;  // in a fixed order, the same on every end
};

struct LinkConfig {
  LinkTransport transport = LinkTransport::automatic;  // links.hidden_states
  int queue_depth = 20;                                // links.queue_depth
  Device device;                                       // this rank's device
  int ipc_slots = 2;                                   // ring slots per sender (ipc)
};

// How many batches of each sender the receiver holds at most (back-pressure above).
std::size_t batches_held_per_sender(int queue_depth, std::size_t senders);

// Payload memory a link's ends hold besides the batch a sender is computing or the
// receiver is training on, in payloads of one batch each, for a token budget to leave
// room for (budget_probe.h). A sender on CUDA counts the IPC ring's slots with their
// headroom (outside torch's allocator) unless links.hidden_states is nccl or mpi; the
// receiver counts its queue, every sender's share full.
struct LinkPayloads {
  double sender = 0;
  double receiver = 0;
};
LinkPayloads link_payloads(const LinkConfig& config, std::size_t senders, bool cuda);

// Whether every end is on the CPU, and whether all are on one node, decide `automatic`.
// Throws ConfigError for a transport the placement cannot use.
LinkTransport resolve_link_transport(LinkTransport requested, bool cpu, bool one_node);

namespace detail {
class PayloadSender;
class PayloadReceiver;
class IncomingPayload;
}  // namespace detail

class HiddenStateSender {
 public:
  // Collective over the ranks of `ends` (not over all of `comm`).
  HiddenStateSender(MPI_Comm comm, const LinkEnds& ends, const LinkConfig& config);
  ~HiddenStateSender();
  HiddenStateSender(const HiddenStateSender&) = delete;
  HiddenStateSender& operator=(const HiddenStateSender&) = delete;

  // Blocks while the receiver's queue is full. Header tensors may live anywhere (they are
  // copied to the host); the payload must be on this rank's device.
  void send(const PackedHiddenBatch& batch);
  // End of this sender's stream. Idempotent. A non-empty `reason` says the stream ended
  // early and the receiver should stop (HiddenStateReceiver::early_close_reason).
  void close(const std::string& reason = {});
  // Whether the receiver asked this sender to end its stream (request_stop). Cheap: one probe.
  bool stop_requested();
  // Tells the receiver this sender failed; its next() throws with `reason`.
  void fail(const std::string& reason);

  LinkTransport transport() const { return transport_; }
  std::int64_t batches_sent() const { return sent_; }

 private:
  MPI_Comm link_ = MPI_COMM_NULL;  // the link's ranks: receiver first, then the senders
  int rank_ = 0;                   // in the communicator the link was built over
  LinkTransport transport_;
  std::unique_ptr<detail::PayloadSender> payload_;
  bool closed_ = false;
  bool stop_requested_ = false;
  std::int64_t sent_ = 0;
};

class HiddenStateReceiver {
 public:
  // Collective over the ranks of `ends`. Starts the receiving thread.
  HiddenStateReceiver(MPI_Comm comm, const LinkEnds& ends, const LinkConfig& config);
  // Stops and joins the receiving thread, so it never outlives MPI.
  ~HiddenStateReceiver();
  HiddenStateReceiver(const HiddenStateReceiver&) = delete;
  HiddenStateReceiver& operator=(const HiddenStateReceiver&) = delete;

  // The next batch from any sender, the earliest arrived first (each sender's batches in
  // its order), waiting for one; nullopt once every sender has closed and the queue is
  // drained. Throws when a sender failed or the link broke. On CUDA the payload is ready for
  // the current stream.
  std::optional<PackedHiddenBatch> next();
  // The next batch of `sender` (a rank of LinkEnds::senders), waiting for it; nullopt once
  // that sender has closed and its batches are drained.
  std::optional<PackedHiddenBatch> next_from(int sender);

  LinkTransport transport() const { return transport_; }
  std::size_t queue_size() const;  // batches waiting, for the queue-depth telemetry

  // Called about every 0.2 s while next() or next_from() waits, on the waiting thread and
  // without the lock, with the seconds waited so far and the senders waited for (open,
  // nothing queued): a watchdog may end the job there (dflash_train: a stalled target).
  using WaitCheck = std::function<void(double waited_seconds, const std::vector<int>& silent_senders)>;
  void set_wait_check(WaitCheck check) { wait_check_ = std::move(check); }

  // Asks every sender to end its stream (see the top of this file). Idempotent.
  void request_stop();
  // The reason of the first sender that closed early with one; empty when none did.
  std::string early_close_reason() const;

 private:
  void send_stop(int link_rank);  // this sender's one stop, once (any thread)
  struct Entry {
    PackedHiddenBatch batch;
    std::function<void()> before_use;  // orders the consumer's stream after the transfer
    std::uint64_t arrival = 0;
  };
  // A batch whose header has arrived and whose payload is on its way.
  struct Incoming {
    PackedHiddenBatch header;
    std::unique_ptr<detail::IncomingPayload> payload;
  };
  void receive_loop();
  // Takes one waiting frame with `tag` from `source` (a link rank, or MPI_ANY_SOURCE);
  // false when none is waiting.
  bool handle_frame(int tag, int source);
  // Queues the batches whose payloads have arrived; false when none had.
  bool queue_arrived();
  // Whether every sender has closed and nothing is on its way (mutex_ held).
  bool all_drained() const;
  // The front entry of queues_[link_rank], handed over to the caller (mutex_ held by `lock`).
  PackedHiddenBatch take(std::size_t link_rank, std::unique_lock<std::mutex>& lock);
  // changed_.wait(lock, ready), calling wait_check_ on the way; `link_rank` is the sender
  // waited for, or 0 for any.
  void wait_for_batch(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready, std::size_t link_rank);
  WaitCheck wait_check_;

  MPI_Comm link_ = MPI_COMM_NULL;
  LinkTransport transport_;
  std::size_t per_sender_depth_;
  std::unique_ptr<detail::PayloadReceiver> payload_;
  std::vector<int> senders_;  // link rank i + 1 is senders_[i] in the caller's communicator
  std::vector<std::unique_ptr<Incoming>> incoming_;  // per link rank; the receiving thread's own

  // Guarded by mutex_.
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::deque<Entry>> queues_;  // per link rank (0, the receiver, stays empty)
  std::vector<bool> open_;                 // per link rank: sender not closed yet
  std::vector<bool> in_flight_;            // per link rank: incoming_ holds a batch
  std::vector<bool> stop_sent_;            // per link rank: its one stop message went out
  int open_count_ = 0;
  std::uint64_t arrivals_ = 0;
  std::uint64_t taken_ = 0;  // batches handed out: the receiving thread waits for this to move
  std::string early_close_reason_;
  bool finished_ = false;   // all_drained()
  bool stop_ = false;       // the destructor asks the thread to leave
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace topotrain::comm
