// The ranks of a group whose memory is one: those on the same GPU, or on CPU the ranks of
// one node (they share its RAM). train.token_budget = "auto" (train/budget_probe.h) plans
// each rank's share of that memory and lets the ranks of one GPU measure in turn.
//
// Found as Runtime finds the node's ranks: the group split by shared memory
// (MPI_COMM_TYPE_SHARED), then, on CUDA, by the GPU's PCI bus id, which is the same in
// every process that sees the GPU whatever CUDA_VISIBLE_DEVICES renumbers (cuda:0 of two
// processes may be two GPUs, and cuda:0 and cuda:1 one). Ranks keep their group order.
#pragma once

#include <mpi.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace topotrain::comm {

class DeviceSharers {
 public:
  // Collective over `group`; `device` is this rank's.
  DeviceSharers(MPI_Comm group, const torch::Device& device);
  ~DeviceSharers();
  DeviceSharers(const DeviceSharers&) = delete;
  DeviceSharers& operator=(const DeviceSharers&) = delete;

  int size() const { return size_; }
  int rank() const { return rank_; }  // among the sharers, in group order
  // The sharers' ranks in `group`, ascending: the same list on each of them. Its first is
  // a name for this device's ranks that all ranks can compare.
  const std::vector<int>& group_ranks() const { return group_ranks_; }
  // Collective over the sharers: every one has arrived. An unwatched MPI_Barrier.
  void barrier() const;
  // Collective over the sharers: the sum of `value` over them (a watched wait: watchdog.h).
  std::int64_t sum(std::int64_t value) const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int size_ = 1;
  int rank_ = 0;
  std::vector<int> group_ranks_;
};

}  // namespace topotrain::comm
