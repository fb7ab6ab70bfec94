#include "topotrain/comm/hidden_state_link.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <thread>

#include "link_comm.h"
#include "link_frame.h"
#include "mpi_types.h"
#include "payload_channel.h"
#include "topotrain/core/error.h"
#include "topotrain/comm/watchdog.h"
#include "topotrain/core/fault_injection.h"

namespace topotrain::comm {

std::size_t batches_held_per_sender(int queue_depth, std::size_t senders) {
  return std::max<std::size_t>(1, static_cast<std::size_t>(std::max(1, queue_depth)) / std::max<std::size_t>(1, senders));
}

LinkPayloads link_payloads(const LinkConfig& config, std::size_t senders, bool cuda) {
  LinkPayloads payloads;
  const bool ipc = cuda && (config.transport == LinkTransport::ipc || config.transport == LinkTransport::automatic);
  if (ipc) payloads.sender = config.ipc_slots * static_cast<double>(detail::ipc_slot_capacity(1 << 20)) / (1 << 20);
  payloads.receiver = static_cast<double>(senders * batches_held_per_sender(config.queue_depth, senders));
  return payloads;
}

LinkTransport resolve_link_transport(LinkTransport requested, bool cpu, bool one_node) {
  if (requested == LinkTransport::automatic)
    return cpu ? LinkTransport::mpi : one_node ? LinkTransport::ipc : LinkTransport::nccl;
  if (cpu && requested != LinkTransport::mpi)
    throw ConfigError(cat("links.hidden_states = \"", to_string(requested),
                          "\" needs CUDA devices on both ends; use \"mpi\" (or \"auto\") for CPU runs"));
  if (requested == LinkTransport::ipc && !one_node)
    throw ConfigError("links.hidden_states = \"ipc\" needs the targets and their drafter on one node; use \"nccl\" "
                      "(or \"auto\") across nodes");
  return requested;
}

namespace {

using namespace detail;

std::uint64_t host_hash() {
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(name, &length);
  return std::hash<std::string>{}(std::string(name, length));
}

// Collective over the link: every end learns every end's placement and so resolves the
// same transport, or throws the same error.
LinkTransport agree_transport(MPI_Comm link, const LinkConfig& config) {
  int size = 0;
  MPI_Comm_size(link, &size);
  unsigned long long mine[3] = {config.device.is_cpu ? 1ull : 0ull, host_hash(),
                                static_cast<unsigned long long>(config.transport)};
  std::vector<unsigned long long> all(3 * size);
  mpi_check(MPI_Allgather(mine, 3, MPI_UNSIGNED_LONG_LONG, all.data(), 3, MPI_UNSIGNED_LONG_LONG, link),
            "MPI_Allgather (link placement)");
  bool cpu = true, cuda = true, one_node = true, same_request = true;
  for (int r = 0; r < size; ++r) {
    cpu = cpu && all[3 * r] == 1;
    cuda = cuda && all[3 * r] == 0;
    one_node = one_node && all[3 * r + 1] == all[1];
    same_request = same_request && all[3 * r + 2] == all[2];
  }
  if (!cpu && !cuda)
    throw ConfigError("hidden-state link: some ends are on the CPU and some on CUDA; place the targets and their "
                      "drafter all on GPUs or all on \"cpu\"");
  if (!same_request) throw std::logic_error("hidden-state link: ends were configured with different transports");
  return resolve_link_transport(config.transport, cpu, one_node);
}

PayloadSetup setup_of(MPI_Comm link, const LinkConfig& config) { return {link, config.device, config.ipc_slots}; }

std::unique_ptr<PayloadSender> make_payload_sender(LinkTransport transport, const PayloadSetup& setup) {
#ifdef TOPOTRAIN_CUDA
  if (transport == LinkTransport::nccl) return make_nccl_payload_sender(setup);
  if (transport == LinkTransport::ipc) return make_ipc_payload_sender(setup);
#endif
  return make_mpi_payload_sender(setup);
}

std::unique_ptr<PayloadReceiver> make_payload_receiver(LinkTransport transport, const PayloadSetup& setup) {
#ifdef TOPOTRAIN_CUDA
  if (transport == LinkTransport::nccl) return make_nccl_payload_receiver(setup);
  if (transport == LinkTransport::ipc) return make_ipc_payload_receiver(setup);
#endif
  return make_mpi_payload_receiver(setup);
}

// Creates the link's communicator and agrees on its transport with the other ends; the
// communicator is freed again when that fails.
template <typename MakePayload>
auto open_link(MPI_Comm comm, const LinkEnds& ends, const LinkConfig& config, MPI_Comm& link,
               LinkTransport& transport, MakePayload make_payload) {
  link = create_link_comm(comm, ends);
  try {
    transport = agree_transport(link, config);
    return make_payload(transport, setup_of(link, config));
  } catch (...) {
    free_link_comm(link);
    throw;
  }
}

void check_ends(MPI_Comm comm, const LinkEnds& ends, bool sender) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  bool listed = std::find(ends.senders.begin(), ends.senders.end(), rank) != ends.senders.end();
  if (ends.senders.empty() || (sender ? !listed : rank != ends.receiver))
    throw std::invalid_argument(cat("hidden-state link: rank ", rank, " is not a ", sender ? "sender" : "receiver",
                                    " of the link to rank ", ends.receiver));
}

// How long a sender named by TOPOTRAIN_FAULT_LINK_STALL pauses between a header and its payload.
constexpr std::chrono::seconds kStallForTests(3);

}  // namespace

HiddenStateSender::HiddenStateSender(MPI_Comm comm, const LinkEnds& ends, const LinkConfig& config) {
  check_ends(comm, ends, true);
  MPI_Comm_rank(comm, &rank_);
  payload_ = open_link(comm, ends, config, link_, transport_, make_payload_sender);
}

HiddenStateSender::~HiddenStateSender() {
  payload_.reset();
  free_link_comm(link_);
}

void HiddenStateSender::send(const PackedHiddenBatch& batch) {
  if (closed_) throw std::logic_error("HiddenStateSender::send after close()");
  check_batch(batch);
  std::string extra = payload_->stage(batch.hidden);
  std::vector<char> frame = encode_frame(FrameKind::data, &batch, extra);
  // Synchronous send: it completes only once the receiver has taken the frame, which it
  // does only while its queue has room. This is the back-pressure. Watched, as every wait
  // on the receiver is: a receiver that stopped is named (watchdog.h's PeerWatchdog).
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_check(MPI_Issend(frame.data(), static_cast<int>(frame.size()), MPI_BYTE, 0, kDataTag, link_, &request),
            "MPI_Issend (hidden-state header)");
  wait_request(&request, "MPI_Issend (hidden-state header)");
  if (fault_injected("TOPOTRAIN_FAULT_LINK_STALL", rank_, sent_)) std::this_thread::sleep_for(kStallForTests);
  payload_->transfer(batch.hidden);
  ++sent_;
}

void HiddenStateSender::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  std::vector<char> frame = encode_frame(FrameKind::close, nullptr, reason);
  mpi_check(MPI_Send(frame.data(), static_cast<int>(frame.size()), MPI_BYTE, 0, kControlTag, link_),
            "MPI_Send (hidden-state close)");
  payload_->drain();
  // The receiver sends every sender one stop (asked for, or answering its close): taking it
  // here leaves no message of this link unreceived, which a later link between the same
  // ranks (a restarted stream) could otherwise match once MPI reuses the communicator's id.
  if (!stop_requested_) {
    MPI_Request request = MPI_REQUEST_NULL;
    mpi_check(MPI_Irecv(nullptr, 0, MPI_BYTE, 0, kStopTag, link_, &request), "MPI_Irecv (hidden-state stop)");
    wait_request(&request, "MPI_Irecv (hidden-state stop)");
    stop_requested_ = true;
  }
}

bool HiddenStateSender::stop_requested() {
  if (stop_requested_ || closed_) return stop_requested_;
  int waiting = 0;
  mpi_check(MPI_Iprobe(0, kStopTag, link_, &waiting, MPI_STATUS_IGNORE), "MPI_Iprobe (hidden-state stop)");
  if (waiting) {
    mpi_check(MPI_Recv(nullptr, 0, MPI_BYTE, 0, kStopTag, link_, MPI_STATUS_IGNORE), "MPI_Recv (hidden-state stop)");
    stop_requested_ = true;
  }
  return stop_requested_;
}

void HiddenStateSender::fail(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  std::vector<char> frame = encode_frame(FrameKind::error, nullptr, reason);
  mpi_check(MPI_Send(frame.data(), static_cast<int>(frame.size()), MPI_BYTE, 0, kControlTag, link_),
            "MPI_Send (hidden-state error)");
}

HiddenStateReceiver::HiddenStateReceiver(MPI_Comm comm, const LinkEnds& ends, const LinkConfig& config) {
  check_ends(comm, ends, false);
  int threading = 0;
  MPI_Query_thread(&threading);
  if (threading < MPI_THREAD_MULTIPLE)
    throw std::runtime_error("hidden-state link: the receiving thread needs MPI initialised with MPI_THREAD_MULTIPLE");
  payload_ = open_link(comm, ends, config, link_, transport_, make_payload_receiver);
  per_sender_depth_ = batches_held_per_sender(config.queue_depth, ends.senders.size());
  queues_.resize(ends.senders.size() + 1);
  open_.assign(ends.senders.size() + 1, true);
  open_[0] = false;
  in_flight_.assign(ends.senders.size() + 1, false);
  stop_sent_.assign(ends.senders.size() + 1, false);
  incoming_.resize(ends.senders.size() + 1);
  open_count_ = static_cast<int>(ends.senders.size());
  senders_ = ends.senders;
  thread_ = std::thread([this] { receive_loop(); });
}

HiddenStateReceiver::~HiddenStateReceiver() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  incoming_.clear();
  queues_.clear();
  payload_.reset();
  free_link_comm(link_);
}

std::size_t HiddenStateReceiver::queue_size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t size = 0;
  for (const auto& queue : queues_) size += queue.size();
  return size;
}

void HiddenStateReceiver::request_stop() {
  for (int link_rank = 1; link_rank <= static_cast<int>(senders_.size()); ++link_rank) send_stop(link_rank);
}

void HiddenStateReceiver::send_stop(int link_rank) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_sent_[link_rank]) return;
    stop_sent_[link_rank] = true;
  }
  // Zero-byte messages go out eagerly: this never waits for the sender.
  mpi_check(MPI_Send(nullptr, 0, MPI_BYTE, link_rank, kStopTag, link_), "MPI_Send (hidden-state stop)");
}

std::string HiddenStateReceiver::early_close_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return early_close_reason_;
}

PackedHiddenBatch HiddenStateReceiver::take(std::size_t link_rank, std::unique_lock<std::mutex>& lock) {
  Entry entry = std::move(queues_[link_rank].front());
  queues_[link_rank].pop_front();
  ++taken_;
  lock.unlock();
  changed_.notify_all();  // room in that sender's queue
  if (entry.before_use) entry.before_use();
  return std::move(entry.batch);
}

void HiddenStateReceiver::wait_for_batch(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready,
                                         std::size_t link_rank) {
  const auto since = std::chrono::steady_clock::now();
  while (!changed_.wait_for(lock, std::chrono::milliseconds(200), ready)) {
    if (!wait_check_) continue;
    std::vector<int> silent;
    for (std::size_t r = 1; r < queues_.size(); ++r)
      if ((link_rank == 0 || r == link_rank) && open_[r] && queues_[r].empty()) silent.push_back(senders_[r - 1]);
    lock.unlock();
    wait_check_(std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count(), silent);
    lock.lock();
  }
}

std::optional<PackedHiddenBatch> HiddenStateReceiver::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  std::size_t earliest = 0;
  wait_for_batch(lock, [&] {
    earliest = 0;
    for (std::size_t r = 1; r < queues_.size(); ++r)
      if (!queues_[r].empty() && (earliest == 0 || queues_[r].front().arrival < queues_[earliest].front().arrival))
        earliest = r;
    return earliest != 0 || finished_ || error_;
  }, 0);
  if (error_) std::rethrow_exception(error_);
  if (earliest == 0) return std::nullopt;
  return take(earliest, lock);
}

std::optional<PackedHiddenBatch> HiddenStateReceiver::next_from(int sender) {
  const auto it = std::find(senders_.begin(), senders_.end(), sender);
  if (it == senders_.end())
    throw std::invalid_argument(cat("HiddenStateReceiver::next_from: rank ", sender, " is not a sender of this link"));
  const std::size_t link_rank = static_cast<std::size_t>(it - senders_.begin()) + 1;
  std::unique_lock<std::mutex> lock(mutex_);
  wait_for_batch(
      lock, [&] { return !queues_[link_rank].empty() || (!open_[link_rank] && !in_flight_[link_rank]) || error_; },
      link_rank);
  if (error_) std::rethrow_exception(error_);
  if (queues_[link_rank].empty()) return std::nullopt;
  return take(link_rank, lock);
}

// Handles one waiting frame with `tag`, if any.
bool HiddenStateReceiver::handle_frame(int tag, int source) {
  int waiting = 0;
  MPI_Status status;
  mpi_check(MPI_Iprobe(source, tag, link_, &waiting, &status), "MPI_Iprobe (hidden-state link)");
  if (!waiting) return false;
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  std::vector<char> raw(bytes);
  int sender = status.MPI_SOURCE;
  mpi_check(MPI_Recv(raw.data(), bytes, MPI_BYTE, sender, tag, link_, MPI_STATUS_IGNORE), "MPI_Recv (hidden-state header)");
  DecodedFrame frame = decode_frame(raw);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!open_[sender]) throw std::runtime_error(cat("hidden-state link: link rank ", sender, " sent after closing"));
  }
  switch (frame.fields.kind) {
    case FrameKind::data: {
      if (incoming_[sender])
        throw std::runtime_error(cat("hidden-state link: link rank ", sender, " sent a header before its last payload"));
      frame.header.sender = senders_[static_cast<std::size_t>(sender - 1)];
      incoming_[sender] = std::make_unique<Incoming>(
          Incoming{std::move(frame.header), payload_->receive(sender, frame.fields, frame.extra)});
      std::lock_guard<std::mutex> lock(mutex_);
      in_flight_[sender] = true;
      break;
    }
    case FrameKind::close: {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        open_[sender] = false;
        --open_count_;
        finished_ = all_drained();
        if (early_close_reason_.empty()) early_close_reason_ = frame.extra;
      }
      send_stop(sender);  // the sender's close waits for its stop (HiddenStateSender::close)
      break;
    }
    case FrameKind::error: {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_sent_[sender] = true;  // a failed sender waits for no stop: it is sent none
      }
      int world_rank = 0;
      MPI_Group link_group, world_group;
      MPI_Comm_group(link_, &link_group);
      MPI_Comm_group(MPI_COMM_WORLD, &world_group);
      MPI_Group_translate_ranks(link_group, 1, &sender, world_group, &world_rank);
      MPI_Group_free(&link_group);
      MPI_Group_free(&world_group);
      throw std::runtime_error(cat("hidden-state sender (rank ", world_rank, ") failed: ", frame.extra));
    }
    default:
      throw std::runtime_error(cat("hidden-state link: unknown frame kind from link rank ", sender));
  }
  changed_.notify_all();
  return true;
}

bool HiddenStateReceiver::all_drained() const {
  return open_count_ == 0 && std::none_of(in_flight_.begin(), in_flight_.end(), [](bool b) { return b; });
}

bool HiddenStateReceiver::queue_arrived() {
  bool queued = false;
  for (std::size_t r = 1; r < incoming_.size(); ++r) {
    if (!incoming_[r] || !incoming_[r]->payload->arrived()) continue;
    ReceivedPayload payload = incoming_[r]->payload->take();
    PackedHiddenBatch batch = std::move(incoming_[r]->header);
    batch.hidden = payload.hidden;
    incoming_[r].reset();
    std::lock_guard<std::mutex> lock(mutex_);
    queues_[r].push_back(Entry{std::move(batch), std::move(payload.before_use), arrivals_++});
    in_flight_[r] = false;
    finished_ = all_drained();
    queued = true;
  }
  if (queued) changed_.notify_all();
  return queued;
}

// Polls rather than blocking in MPI so that the destructor can always stop it, and so that
// no sender can hold it: a payload's transfer is started and polled, never waited for.
// Control frames are taken at any time; a sender's data frames only while its queue has
// room and no payload of it is on its way, which leaves that sender blocked in its
// synchronous send: the back-pressure.
void HiddenStateReceiver::receive_loop() {
  using namespace std::chrono;
  // Polled sooner while a payload is on its way: MPI moves a message only inside MPI calls.
  const microseconds shortest(20), longest_idle(2000), longest_in_flight(200);
  microseconds pause = shortest;
  std::vector<int> with_room;
  try {
    while (true) {
      std::uint64_t taken = 0;
      microseconds longest = longest_idle;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_ || finished_) return;
        if (std::find(in_flight_.begin(), in_flight_.end(), true) != in_flight_.end()) longest = longest_in_flight;
        with_room.clear();
        for (std::size_t r = 1; r < queues_.size(); ++r)
          if (open_[r] && !in_flight_[r] && queues_[r].size() < per_sender_depth_) with_room.push_back(static_cast<int>(r));
        taken = taken_;
      }
      bool handled = queue_arrived();
      handled = handle_frame(kControlTag, MPI_ANY_SOURCE) || handled;
      for (int r : with_room) handled = handle_frame(kDataTag, r) || handled;
      if (handled) {
        pause = shortest;
        continue;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      // Woken early when next() makes room.
      changed_.wait_for(lock, pause, [&] { return stop_ || taken_ != taken; });
      pause = std::min(longest, pause * 2);
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  changed_.notify_all();
}

}  // namespace topotrain::comm
