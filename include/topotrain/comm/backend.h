// Collective and point-to-point communication over one group of ranks: the interface the
// trainers use, whatever moves the bytes (MPI for CPU tensors, NCCL for CUDA tensors).
//
// A Backend is built per role group or per link from the MPI communicator of that group,
// never world-wide, so that ranks of different groups may share a GPU (NCCL refuses two
// ranks of one communicator on the same device).
//
// Ordering contract: every collective is entered by all ranks of the group in the same
// order. "Blocking" calls (broadcast, send, recv, barrier, Work::wait) complete with
// respect to the caller's stream: on CPU the data is in place when they return; on CUDA
// the caller's current stream is ordered after the operation and the host does not wait.
#pragma once

#include <mpi.h>

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>

#include "topotrain/core/device_span.h"
#include "topotrain/core/topology.h"

namespace topotrain::comm {

enum class ReduceOp { sum, avg };

// Completion of an asynchronous collective. The backend keeps the tensor alive until the
// operation has finished.
class Work {
 public:
  virtual ~Work() = default;
  // CPU: blocks until the result is in the tensor. CUDA: orders the current stream after
  // the collective (no host synchronisation).
  virtual void wait() = 0;
  // The operation's device time on the stream it ran on, from when its inputs were ready
  // to its end (waiting for slower ranks included), moved out; empty unless the backend
  // runs on a device stream and was asked to time collectives (Backend::time_collectives).
  virtual std::optional<DeviceSpan> take_device_span() { return std::nullopt; }
};

class Backend {
 public:
  virtual ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // A private duplicate of the group's communicator for host-side control messages
  // (consistency checks, handshakes); never used for tensor traffic.
  MPI_Comm control() const { return control_; }
  virtual Device device() const = 0;
  virtual const char* name() const = 0;

  // all_reduce_async then also records each operation's device time, for
  // Work::take_device_span (two events per collective; backends on a device stream only).
  void time_collectives(bool on) { time_collectives_ = on; }

  // In place, over every rank of the group. The tensor must be contiguous and on
  // device(); it must not be touched until the Work has been waited for.
  virtual std::unique_ptr<Work> all_reduce_async(const at::Tensor& tensor, ReduceOp op) = 0;
  void all_reduce(const at::Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op)->wait(); }
  virtual void broadcast(const at::Tensor& tensor, int root) = 0;
  // Peers are ranks of this group.
  virtual void send(const at::Tensor& tensor, int peer) = 0;
  virtual void recv(const at::Tensor& tensor, int peer) = 0;
  virtual void barrier() = 0;

 protected:
  // Collective over `group`: duplicates it for control().
  explicit Backend(MPI_Comm group);
  // Throws std::invalid_argument unless `tensor` is contiguous and on device().
  void check_tensor(const at::Tensor& tensor, const char* operation) const;
  bool timing_collectives() const { return time_collectives_; }

 private:
  MPI_Comm control_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  bool time_collectives_ = false;
};

// Collective over `group`: MPI on the CPU, NCCL on a CUDA device (NCCL only in CUDA
// builds; asking for CUDA in a CPU build throws).
std::unique_ptr<Backend> make_backend(MPI_Comm group, const Device& device);

}  // namespace topotrain::comm
