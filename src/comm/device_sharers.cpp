#include "topotrain/comm/device_sharers.h"

#include <cstring>
#include <string>
#include <vector>

#include "mpi_types.h"
#include "topotrain/comm/watchdog.h"
#include "topotrain/torch_compat.h"

namespace topotrain::comm {

DeviceSharers::DeviceSharers(MPI_Comm group, const torch::Device& device) {
  int rank = 0;
  MPI_Comm_rank(group, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  detail::mpi_check(MPI_Comm_split_type(group, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
                    "MPI_Comm_split_type (ranks sharing a device)");
  if (!device.is_cuda()) {
    comm_ = node;  // a CPU rank's memory is its node's
  } else {
    // The node's ranks split by bus id: the colour is the first node rank with this one.
    constexpr std::size_t kKey = 64;
    std::string key = compat::device_bus_id(device.index());
    key.resize(kKey, '\0');
    int node_rank = 0, node_size = 0;
    MPI_Comm_rank(node, &node_rank);
    MPI_Comm_size(node, &node_size);
    std::vector<char> keys(kKey * static_cast<std::size_t>(node_size));
    detail::mpi_check(MPI_Allgather(key.data(), static_cast<int>(kKey), MPI_CHAR, keys.data(), static_cast<int>(kKey),
                                    MPI_CHAR, node),
                      "MPI_Allgather (ranks sharing a device)");
    int color = 0;
    while (std::memcmp(keys.data() + kKey * static_cast<std::size_t>(color), key.data(), kKey) != 0) ++color;
    detail::mpi_check(MPI_Comm_split(node, color, node_rank, &comm_), "MPI_Comm_split (ranks sharing a device)");
    MPI_Comm_free(&node);
  }
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
  // In the sharers' order, which is the group's (the splits keep it): ascending.
  group_ranks_.resize(static_cast<std::size_t>(size_));
  detail::mpi_check(MPI_Allgather(&rank, 1, MPI_INT, group_ranks_.data(), 1, MPI_INT, comm_),
                    "MPI_Allgather (the ranks sharing a device)");
}

DeviceSharers::~DeviceSharers() {
  if (comm_ != MPI_COMM_NULL && detail::mpi_alive()) MPI_Comm_free(&comm_);
}

// Not through wait_request: groups of sharers differ in size, so their barriers differ in
// number, and a watchdog's positions must count the same waits on every rank (watchdog.h).
void DeviceSharers::barrier() const { detail::mpi_check(MPI_Barrier(comm_), "MPI_Barrier (ranks sharing a device)"); }

std::int64_t DeviceSharers::sum(std::int64_t value) const {
  all_reduce_in_place(&value, 1, MPI_INT64_T, MPI_SUM, comm_, "MPI_Iallreduce (ranks sharing a device)");
  return value;
}

}  // namespace topotrain::comm
