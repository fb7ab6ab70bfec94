#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <thread>

#include "topotrain/comm/hidden_state_link.h"
#include "topotrain/comm/link_start.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"

using namespace topotrain;
using namespace topotrain::comm;

namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// The last rank drafts; every other rank is a target feeding it (7 -> 1 at np 8).
LinkEnds fan_in() {
  LinkEnds ends;
  ends.receiver = world_size() - 1;
  for (int r = 0; r + 1 < world_size(); ++r) ends.senders.push_back(r);
  return ends;
}
bool is_receiver() { return world_rank() == world_size() - 1; }

LinkConfig cpu_config(int queue_depth) {
  LinkConfig config;
  config.queue_depth = queue_depth;
  config.device = Device::cpu();
  return config;
}

// Batch `seq` of sender `rank`: random sizes and contents, reproducible from the pair,
// which sample_ids[0] records so that the receiver can rebuild the expected batch.
PackedHiddenBatch make_batch(int rank, int seq) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(rank * 7919 + seq);
  std::int64_t sequences = 1 + at::randint(4, {1}, generator).item<std::int64_t>();
  at::Tensor lengths = 1 + at::randint(12, {sequences}, generator, at::kInt);
  PackedHiddenBatch batch;
  PackedBatch& packed = batch.packed;
  packed.cu_seqlens = at::cat({at::zeros({1}, at::kInt), lengths.cumsum(0, at::kInt)});
  std::int64_t tokens = packed.cu_seqlens[-1].item<std::int64_t>();
  packed.tokens = at::randint(151000, {tokens}, generator, at::kLong);
  packed.loss_mask = at::randint(2, {tokens}, generator, at::kByte);
  packed.positions = at::randint(4096, {tokens}, generator, at::kLong);
  packed.sample_ids = at::randint(1000, {sequences}, generator, at::kLong);
  packed.sample_ids[0] = rank * 1000000 + seq;
  packed.summarize();
  at::ScalarType type = seq % 2 == 0 ? at::kBFloat16 : at::kFloat;
  batch.hidden = at::randn({tokens, 3 * 8}, generator, at::kFloat).to(type);
  if (seq % 3 != 0) batch.cursor = at::tensor({std::int64_t{rank}, std::int64_t{seq}, std::int64_t{-7}});
  return batch;
}

void expect_identical(const PackedHiddenBatch& got, const PackedHiddenBatch& want) {
  std::vector<std::pair<at::Tensor, at::Tensor>> tensors{{got.hidden, want.hidden}};
  for (const PackedBatchField& field : kPackedBatchFields)
    tensors.emplace_back(got.packed.*field.member, want.packed.*field.member);
  for (const auto& [g, w] : tensors) {
    ASSERT_EQ(g.scalar_type(), w.scalar_type());
    ASSERT_TRUE(at::equal(g, w));  // bit-exact, bf16 included
  }
  ASSERT_EQ(got.packed.sequence_lengths, want.packed.sequence_lengths);
  ASSERT_EQ(got.packed.max_seqlen, want.packed.max_seqlen);
  ASSERT_EQ(got.packed.num_loss_targets, want.packed.num_loss_targets);
  ASSERT_EQ(got.cursor.defined(), want.cursor.defined());
  if (want.cursor.defined()) {
    ASSERT_TRUE(at::equal(got.cursor, want.cursor));
  }
}

// The threads of this process, as the kernel lists them.
std::size_t thread_count() { return list_directory("/proc/self/task").size(); }

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class HiddenStateLink : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

}  // namespace

TEST(HiddenStateLinkTransport, AutoPicksByPlacementAndBadChoicesAreConfigErrors) {
  EXPECT_EQ(resolve_link_transport(LinkTransport::automatic, true, true), LinkTransport::mpi);
  EXPECT_EQ(resolve_link_transport(LinkTransport::automatic, false, true), LinkTransport::ipc);
  EXPECT_EQ(resolve_link_transport(LinkTransport::automatic, false, false), LinkTransport::nccl);
  EXPECT_EQ(resolve_link_transport(LinkTransport::mpi, false, false), LinkTransport::mpi);
  EXPECT_THROW(resolve_link_transport(LinkTransport::nccl, true, true), ConfigError);
  EXPECT_THROW(resolve_link_transport(LinkTransport::ipc, true, true), ConfigError);
  EXPECT_THROW(resolve_link_transport(LinkTransport::ipc, false, false), ConfigError);
}

// What a token budget must leave room for on each end (budget_probe.h): the receiver's
// queue, every sender's share full (20 over 7 senders: 2 each), and on CUDA the sender's
// IPC ring of 2 slots with their 25% headroom, unless the link is nccl or mpi.
TEST(HiddenStateLinkMemory, CountsTheQueueAndTheIpcRing) {
  EXPECT_EQ(comm::batches_held_per_sender(20, 7), 2u);
  EXPECT_EQ(comm::batches_held_per_sender(2, 4), 1u);
  comm::LinkConfig config;
  config.queue_depth = 20;
  const comm::LinkPayloads ipc = comm::link_payloads(config, 7, true);
  EXPECT_DOUBLE_EQ(ipc.receiver, 14);
  EXPECT_DOUBLE_EQ(ipc.sender, 2.5);
  EXPECT_DOUBLE_EQ(comm::link_payloads(config, 7, false).sender, 0);
  config.transport = LinkTransport::nccl;
  EXPECT_DOUBLE_EQ(comm::link_payloads(config, 1, true).sender, 0);
  EXPECT_DOUBLE_EQ(comm::link_payloads(config, 1, true).receiver, 20);
}

TEST_F(HiddenStateLink, FanInDeliversEveryBatchOnceBitExact) {
  const int per_sender = 6;
  LinkEnds ends = fan_in();
  if (!is_receiver()) {
    HiddenStateSender sender(MPI_COMM_WORLD, ends, cpu_config(4));
    EXPECT_EQ(sender.transport(), LinkTransport::mpi);
    for (int seq = 0; seq < per_sender; ++seq) sender.send(make_batch(world_rank(), seq));
    sender.close();
    EXPECT_EQ(sender.batches_sent(), per_sender);
    return;
  }
  HiddenStateReceiver receiver(MPI_COMM_WORLD, ends, cpu_config(4));
  std::map<int, int> next_seq;  // per sender: batches arrive in the order sent
  int received = 0;
  while (auto batch = receiver.next()) {
    std::int64_t id = batch->packed.sample_ids[0].item<std::int64_t>();
    int rank = static_cast<int>(id / 1000000), seq = static_cast<int>(id % 1000000);
    ASSERT_EQ(seq, next_seq[rank]++) << "from rank " << rank;
    ASSERT_EQ(batch->sender, rank);
    expect_identical(*batch, make_batch(rank, seq));
    ++received;
  }
  EXPECT_EQ(received, per_sender * static_cast<int>(ends.senders.size()));
  for (int rank : ends.senders) EXPECT_EQ(next_seq[rank], per_sender) << "from rank " << rank;
  EXPECT_FALSE(receiver.next().has_value());  // stays at end of stream
}

// The receiver holds `depth` batches and stops taking more; the first sender must block
// until the receiver consumes, and resume afterwards without losing anything.
TEST_F(HiddenStateLink, SlowReceiverBlocksTheSenderWithABoundedQueue) {
  const int depth = 3, total = depth + 2;
  const int release_tag = 77;
  LinkEnds ends = fan_in();
  // queue_depth is shared among the senders: rank 0's share is `depth`.
  const int queue_depth = depth * static_cast<int>(ends.senders.size());
  if (!is_receiver()) {
    HiddenStateSender sender(MPI_COMM_WORLD, ends, cpu_config(queue_depth));
    std::vector<std::int64_t> returned;
    if (world_rank() == 0)
      for (int seq = 0; seq < total; ++seq) {
        sender.send(make_batch(0, seq));
        returned.push_back(now_ns());
      }
    sender.close();
    if (world_rank() != 0) return;
    std::int64_t released = 0;
    MPI_Recv(&released, 1, MPI_INT64_T, ends.receiver, release_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int seq = 0; seq < total; ++seq) {
      if (seq < depth) EXPECT_LT(returned[seq], released) << "send " << seq << " fits in the queue";
      else EXPECT_GT(returned[seq], released) << "send " << seq << " should have waited for the receiver";
    }
    return;
  }
  HiddenStateReceiver receiver(MPI_COMM_WORLD, ends, cpu_config(queue_depth));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (receiver.queue_size() < static_cast<std::size_t>(depth) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(receiver.queue_size(), static_cast<std::size_t>(depth));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(receiver.queue_size(), static_cast<std::size_t>(depth)) << "the queue grew beyond queue_depth";
  std::int64_t released = now_ns();
  int received = 0;
  while (auto batch = receiver.next()) {
    expect_identical(*batch, make_batch(0, received));
    ++received;
  }
  EXPECT_EQ(received, total);
  MPI_Send(&released, 1, MPI_INT64_T, 0, release_tag, MPI_COMM_WORLD);
}

TEST_F(HiddenStateLink, EmptyStreamsEndCleanly) {
  LinkEnds ends = fan_in();
  if (!is_receiver()) {
    HiddenStateSender sender(MPI_COMM_WORLD, ends, cpu_config(2));
    sender.close();
    sender.close();  // idempotent
    return;
  }
  HiddenStateReceiver receiver(MPI_COMM_WORLD, ends, cpu_config(2));
  EXPECT_FALSE(receiver.next().has_value());
  EXPECT_EQ(receiver.queue_size(), 0u);
}

// The senders never close: the receiver's destructor must stop its thread, which is still
// polling for their frames, and join it (a destructor that hangs times the test out).
TEST_F(HiddenStateLink, ReceiverLeftBeforeEndOfStreamStopsItsThread) {
  LinkEnds ends = fan_in();
  if (!is_receiver()) {
    HiddenStateSender sender(MPI_COMM_WORLD, ends, cpu_config(2));
  } else {
    auto receiver = std::make_unique<HiddenStateReceiver>(MPI_COMM_WORLD, ends, cpu_config(2));
    const std::size_t with_receiver = thread_count();
    receiver.reset();
    // A joined thread may linger in /proc for a moment after join() returns.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (thread_count() >= with_receiver && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_LT(thread_count(), with_receiver) << "the receiving thread outlived its receiver";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_F(HiddenStateLink, ASendersFailureReachesTheReceiver) {
  LinkEnds ends = fan_in();
  if (!is_receiver()) {
    HiddenStateSender sender(MPI_COMM_WORLD, ends, cpu_config(2));
    if (world_rank() == 0) sender.fail("CUDA out of memory in the target forward");
    else sender.close();
    return;
  }
  HiddenStateReceiver receiver(MPI_COMM_WORLD, ends, cpu_config(2));
  try {
    while (receiver.next()) {
    }
    FAIL() << "expected the sender's error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("hidden-state sender (rank 0) failed: CUDA out of memory"));
  }
  // A job ends here (the error takes every rank down); this test lets the senders that
  // closed have the stop their close waits for.
  receiver.request_stop();
}

TEST_F(HiddenStateLink, CudaTransportOnCpuFailsOnEveryEnd) {
  LinkEnds ends = fan_in();
  LinkConfig config = cpu_config(2);
  config.transport = LinkTransport::nccl;
  if (is_receiver()) EXPECT_THROW(HiddenStateReceiver(MPI_COMM_WORLD, ends, config), ConfigError);
  else EXPECT_THROW(HiddenStateSender(MPI_COMM_WORLD, ends, config), ConfigError);
}

TEST_F(HiddenStateLink, MalformedBatchesAreRejectedBeforeSending) {
  LinkEnds ends = fan_in();
  if (!is_receiver()) {
    HiddenStateSender sender(MPI_COMM_WORLD, ends, cpu_config(2));
    PackedHiddenBatch batch = make_batch(world_rank(), 0);
    batch.packed.cu_seqlens[-1] = 0;
    EXPECT_THROW(sender.send(batch), std::invalid_argument);
    batch = make_batch(world_rank(), 0);
    batch.packed.positions = batch.packed.positions.narrow(0, 0, 1);
    EXPECT_THROW(sender.send(batch), std::invalid_argument);
    batch = make_batch(world_rank(), 0);
    batch.hidden = batch.hidden.to(at::kDouble);
    EXPECT_THROW(sender.send(batch), std::invalid_argument);
    sender.close();
    return;
  }
  HiddenStateReceiver receiver(MPI_COMM_WORLD, ends, cpu_config(2));
  EXPECT_FALSE(receiver.next().has_value());
}

// request_stop: every sender sees it and closes; the receiver drains what was in flight,
// and each sender's batches still arrive in order, none lost or repeated before the stop.
TEST_F(HiddenStateLink, RequestStopEndsEveryStream) {
  LinkEnds ends = fan_in();
  if (!is_receiver()) {
    HiddenStateSender sender(MPI_COMM_WORLD, ends, cpu_config(2));
    int seq = 0;
    while (!sender.stop_requested()) sender.send(make_batch(world_rank(), seq++));
    sender.close();
    return;
  }
  HiddenStateReceiver receiver(MPI_COMM_WORLD, ends, cpu_config(2));
  std::map<int, int> next_seq;
  for (int trained = 0; trained < 5; ++trained) {
    auto batch = receiver.next();
    ASSERT_TRUE(batch.has_value());
    ASSERT_EQ(batch->packed.sample_ids[0].item<std::int64_t>() % 1000000, next_seq[batch->sender]++);
  }
  receiver.request_stop();
  receiver.request_stop();  // idempotent
  while (auto batch = receiver.next())
    ASSERT_EQ(batch->packed.sample_ids[0].item<std::int64_t>() % 1000000, next_seq[batch->sender]++);
  EXPECT_TRUE(receiver.early_close_reason().empty());
}

TEST_F(HiddenStateLink, AnEarlyCloseCarriesItsReason) {
  LinkEnds ends = fan_in();
  if (!is_receiver()) {
    HiddenStateSender sender(MPI_COMM_WORLD, ends, cpu_config(2));
    sender.send(make_batch(world_rank(), 1));
    sender.close(world_rank() == 0 ? "out of memory in the target forward" : "");
    return;
  }
  HiddenStateReceiver receiver(MPI_COMM_WORLD, ends, cpu_config(2));
  int received = 0;
  while (receiver.next()) ++received;
  EXPECT_EQ(received, static_cast<int>(ends.senders.size()));
  EXPECT_EQ(receiver.early_close_reason(), "out of memory in the target forward");
}

// next_from takes the senders in a rotation whatever the arrival order, each one's batches
// in its order, and reports a closed sender's end of stream.
TEST_F(HiddenStateLink, NextFromTakesTheSendersInRotation) {
  const int per_sender = 3;
  LinkEnds ends = fan_in();
  if (!is_receiver()) {
    HiddenStateSender sender(MPI_COMM_WORLD, ends, cpu_config(2 * static_cast<int>(ends.senders.size())));
    // The last sender starts late, so arrival order differs from the rotation.
    if (world_rank() == ends.senders.back()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int seq = 0; seq < per_sender; ++seq) sender.send(make_batch(world_rank(), seq));
    sender.close();
    return;
  }
  HiddenStateReceiver receiver(MPI_COMM_WORLD, ends, cpu_config(2 * static_cast<int>(ends.senders.size())));
  const int n = static_cast<int>(ends.senders.size());
  for (int turn = 0; turn < per_sender * n; ++turn) {
    const int from = ends.senders[static_cast<std::size_t>(turn % n)];
    auto batch = receiver.next_from(from);
    ASSERT_TRUE(batch.has_value()) << "turn " << turn;
    ASSERT_EQ(batch->sender, from);
    expect_identical(*batch, make_batch(from, turn / n));
  }
  for (int from : ends.senders) EXPECT_FALSE(receiver.next_from(from).has_value());
  EXPECT_FALSE(receiver.next().has_value());
  EXPECT_THROW(receiver.next_from(ends.receiver), std::invalid_argument);
}

// A sender that stalls between its header and its payload (TOPOTRAIN_FAULT_LINK_STALL:
// rank 0 pauses 3 s after its first header) holds up only its own stream: the others'
// batches, sent later, are delivered first, and the stalled one still arrives whole.
TEST_F(HiddenStateLink, ASenderStalledMidSendHoldsUpNoOtherSender) {
  LinkEnds ends = fan_in();
  if (ends.senders.size() < 2) GTEST_SKIP() << "needs two senders";
  const int later_batches = 2;
  setenv("TOPOTRAIN_FAULT_LINK_STALL", "0:0", 1);
  if (!is_receiver()) {
    HiddenStateSender sender(MPI_COMM_WORLD, ends, cpu_config(20));
    // The stalling sender's header goes first, so the receiver takes it before any other.
    if (world_rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const int batches = world_rank() == 0 ? 1 : later_batches;
    for (int seq = 0; seq < batches; ++seq) sender.send(make_batch(world_rank(), seq));
    sender.close();
    unsetenv("TOPOTRAIN_FAULT_LINK_STALL");
    return;
  }
  HiddenStateReceiver receiver(MPI_COMM_WORLD, ends, cpu_config(20));
  std::vector<int> order;
  while (auto batch = receiver.next()) {
    const std::int64_t id = batch->packed.sample_ids[0].item<std::int64_t>();
    const int rank = static_cast<int>(id / 1000000), seq = static_cast<int>(id % 1000000);
    expect_identical(*batch, make_batch(rank, seq));
    order.push_back(rank);
  }
  unsetenv("TOPOTRAIN_FAULT_LINK_STALL");
  ASSERT_EQ(order.size(), 1 + later_batches * (ends.senders.size() - 1));
  EXPECT_EQ(order.back(), 0) << "the stalled sender's batch came before the others'";
  EXPECT_EQ(std::count(order.begin(), order.end(), 0), 1);
}

// Each sender gets its own words, and only those: a message already waiting on the parent
// communicator, from the same rank with the same tag (0), is not taken for the start
// message. (Not a tag equal to the receiver's rank: Open MPI's MPI_Comm_create_group, which
// builds the link's communicators, can take that tag on the parent for its own messages.)
TEST_F(HiddenStateLink, EachSenderGetsItsOwnStartMessage) {
  LinkEnds ends = fan_in();
  const auto words_for = [](int rank) {
    return std::vector<std::uint64_t>{std::uint64_t(rank), 1000u + rank, ~std::uint64_t(rank), 0};
  };
  std::uint64_t decoy[4] = {7, 7, 7, 7};
  if (is_receiver()) {
    std::vector<MPI_Request> decoys(ends.senders.size());
    std::vector<std::vector<std::uint64_t>> per_sender;
    for (std::size_t i = 0; i < ends.senders.size(); ++i) {
      MPI_Isend(decoy, 4, MPI_UINT64_T, ends.senders[i], 0, MPI_COMM_WORLD, &decoys[i]);
      per_sender.push_back(words_for(ends.senders[i]));
    }
    send_link_start(MPI_COMM_WORLD, ends, per_sender);
    MPI_Waitall(static_cast<int>(decoys.size()), decoys.data(), MPI_STATUSES_IGNORE);
    return;
  }
  EXPECT_EQ(receive_link_start(MPI_COMM_WORLD, ends, 4), words_for(world_rank()));
  std::uint64_t got[4] = {0, 0, 0, 0};
  MPI_Recv(got, 4, MPI_UINT64_T, ends.receiver, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  EXPECT_EQ(got[0], 7u);
}

TEST_F(HiddenStateLink, AStartMessageOfAnotherLengthIsAnErrorOnTheSender) {
  LinkEnds ends = fan_in();
  if (is_receiver()) {
    EXPECT_THROW(send_link_start(MPI_COMM_WORLD, ends, {}), std::invalid_argument);  // before any MPI call
    send_link_start(MPI_COMM_WORLD, ends, std::vector<std::vector<std::uint64_t>>(ends.senders.size(), {1, 2, 3}));
    return;
  }
  try {
    receive_link_start(MPI_COMM_WORLD, ends, 4);
    ADD_FAILURE() << "a 3-word start message was taken for a 4-word one";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("holds 3 words, expected 4"));
  }
}
