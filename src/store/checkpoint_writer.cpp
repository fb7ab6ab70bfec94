#include "topotrain/store/checkpoint_writer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <system_error>
#include <utility>
#include <vector>

#ifdef TOPOTRAIN_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "topotrain/core/error.h"
#include "topotrain/core/fault_injection.h"
#include "topotrain/core/files.h"
#include "topotrain/core/io_failure.h"
#include "topotrain/core/log.h"
#include "topotrain/store/checkpoint_file.h"
#include "topotrain/store/run_dir_files.h"
#include "topotrain/torch_compat.h"

namespace topotrain {

// The snapshot buffers and what the save in flight put in them.
struct CheckpointWriter::Snapshot {
  at::Tensor block;                           // the buffers' one allocation
  std::map<std::string, at::Tensor> buffers;  // views of block, shaped like the state's tensors
  std::vector<at::Device> devices;            // where each of those tensors is, in name order
  std::int64_t bytes = 0;
  bool pinned = false;
  CheckpointState state;  // the save in flight: its metadata, and `buffers` as its tensors
  double stall_seconds = 0;
#ifdef TOPOTRAIN_CUDA
  // The copies from one device: on `stream`, between the two events.
  struct DeviceCopies {
    c10::DeviceIndex device;
    c10::cuda::CUDAStream stream;
    std::unique_ptr<at::cuda::CUDAEvent> begin, done;
  };
  std::vector<DeviceCopies> copies;
  // One tensor's device-to-host copy into its pinned buffer, left for the writer thread to
  // issue (issue_device_copies): on copies[on].stream, after that device's work of save().
  // It holds the tensor until then: a tensor freed before its copy was enqueued would let the
  // allocator hand its memory out again (record_stream covers only work already enqueued).
  struct PendingCopy {
    std::size_t on;
    void* to;
    at::Tensor from;
  };
  std::vector<PendingCopy> pending;
  // Each device's side stream, taken from torch's pool when the buffers are allocated: the
  // pool's first use creates its streams, which can wait for the device.
  std::vector<std::pair<c10::DeviceIndex, c10::cuda::CUDAStream>> side_streams;
  bool updates_unordered = false;  // order_updates_after_snapshot() has not run since
  // Whether the writer thread has issued every pending copy and recorded the `done` events:
  // only then can a stream be ordered after them.
  std::mutex issued_mutex;
  std::condition_variable issued_changed;
  bool issued = true;
#endif
};

namespace {

constexpr std::int64_t kBufferAlignment = 256;  // bytes; what cudaMemcpy is fastest at

// The buffers were made for tensors of these names, shapes, dtypes and devices.
bool same_layout(const CheckpointWriter::Snapshot& snapshot, const std::map<std::string, at::Tensor>& tensors) {
  if (snapshot.buffers.size() != tensors.size()) return false;
  auto device = snapshot.devices.begin();
  for (auto a = snapshot.buffers.begin(), b = tensors.begin(); a != snapshot.buffers.end(); ++a, ++b, ++device)
    if (a->first != b->first || a->second.sizes() != b->second.sizes() ||
        a->second.scalar_type() != b->second.scalar_type() || *device != b->second.device())
      return false;
  return true;
}

#ifdef TOPOTRAIN_CUDA
// The snapshot's device-to-host copies go out in chunks of at most kCopyChunkBytes, with no
// more than kCopyBytesInFlight queued on the device at a time. Whatever the device orders
// behind copies in flight waits for those bytes only, not for the whole snapshot: another
// device-to-host copy, such as the step's read, which queues behind them on the copy engine,
// or an allocation that CUDA orders after the work of every stream. The bound is in bytes,
// not chunks: most of a model's state tensors are far smaller than a chunk, and a bound in
// chunks would make each small copy wait for an earlier one. The whole copy takes longer
// bounded than issued at once (bench/moe/RESULTS.md): that is the price of the short waits.
constexpr std::size_t kCopyChunkBytes = std::size_t{32} << 20;
constexpr std::size_t kCopyBytesInFlight = 2 * kCopyChunkBytes;

// Prepares `buffer` <- `tensor` on a side stream of the tensor's device, after the work
// enqueued so far on its current stream: a pinned contiguous copy is left for the writer
// thread to issue (issue_device_copies), any other is done now.
void copy_from_device(CheckpointWriter::Snapshot& snapshot, const at::Tensor& tensor, at::Tensor& buffer) {
  const c10::DeviceIndex device = tensor.device().index();
  auto copies = std::find_if(snapshot.copies.begin(), snapshot.copies.end(),
                             [&](const auto& c) { return c.device == device; });
  if (copies == snapshot.copies.end()) {
    at::cuda::CUDAEvent ready;
    ready.record(c10::cuda::getCurrentCUDAStream(device));
    auto side = std::find_if(snapshot.side_streams.begin(), snapshot.side_streams.end(),
                             [&](const auto& s) { return s.first == device; });
    CheckpointWriter::Snapshot::DeviceCopies fresh{device, side->second,
                                                   std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault),
                                                   std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault)};
    ready.block(fresh.stream);
    fresh.begin->record(fresh.stream);
    snapshot.copies.push_back(std::move(fresh));
    copies = std::prev(snapshot.copies.end());
  }
  c10::cuda::CUDAStreamGuard guard(copies->stream);
  // The caching allocator must not hand the tensor's memory to others before the copy ran.
  tensor.record_stream(copies->stream);
  if (!snapshot.pinned || !tensor.is_contiguous()) {
    // Into pageable memory the copy is synchronous: the host waits, which is what
    // checkpoint.pinned = false costs.
    buffer.copy_(tensor, /*non_blocking=*/snapshot.pinned);
    return;
  }
  snapshot.pending.push_back({static_cast<std::size_t>(copies - snapshot.copies.begin()), buffer.data_ptr(), tensor});
}

// On the writer thread: issues the pending copies chunk by chunk (kCopyBytesInFlight at a
// time), records each device's `done` after its last, and then, also when a copy fails, lets
// order_updates_after_snapshot() go on. A failed copy throws: the checkpoint fails, and the
// updates it then no longer waits for change only what that checkpoint would have held.
void issue_device_copies(CheckpointWriter::Snapshot& snapshot) {
  struct Release {
    CheckpointWriter::Snapshot& snapshot;
    ~Release() {
      {
        std::lock_guard<std::mutex> lock(snapshot.issued_mutex);
        snapshot.issued = true;
      }
      snapshot.issued_changed.notify_all();
    }
  } release{snapshot};
  std::deque<std::pair<at::cuda::CUDAEvent, std::size_t>> in_flight;  // each chunk's end and bytes
  std::size_t bytes_in_flight = 0;
  for (const auto& copy : snapshot.pending) {
    const auto& on = snapshot.copies[copy.on];
    c10::cuda::CUDAGuard device(on.device);
    const auto bytes = static_cast<std::size_t>(copy.from.nbytes());
    const auto* from = static_cast<const char*>(copy.from.data_ptr());
    for (std::size_t offset = 0; offset < bytes; offset += kCopyChunkBytes) {
      const std::size_t chunk = std::min(kCopyChunkBytes, bytes - offset);
      while (!in_flight.empty() && bytes_in_flight + chunk > kCopyBytesInFlight) {
        in_flight.front().first.synchronize();
        bytes_in_flight -= in_flight.front().second;
        in_flight.pop_front();
      }
      // CUDA's own call, whose contract makes a device-to-host copy into page-locked memory
      // asynchronous; torch's copy_ is not relied on for memory its allocator did not hand out.
      const cudaError_t status = cudaMemcpyAsync(static_cast<char*>(copy.to) + offset, from + offset, chunk,
                                                 cudaMemcpyDeviceToHost, on.stream.stream());
      if (status != cudaSuccess)
        throw std::runtime_error(cat("checkpoint snapshot copy failed: ", cudaGetErrorString(status)));
      in_flight.emplace_back();
      in_flight.back().first.record(on.stream);
      in_flight.back().second = chunk;
      bytes_in_flight += chunk;
    }
  }
  for (auto& c : snapshot.copies) c.done->record(c.stream);
  snapshot.pending.clear();  // the tensors go back to the allocator, now behind their copies
}
#endif

void prune(const std::string& run_dir, int keep, const std::string& newest) {
  auto files = checkpoint_files(run_dir);
  if (keep > 0 && files.size() > static_cast<std::size_t>(keep)) {
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < files.size(); ++i) {
      if (files[i].second == newest) continue;
      try {
        remove_file(files[i].second);
      } catch (const std::system_error& e) {
        log_warn("cannot delete old checkpoint " + files[i].second + ": " + e.code().message());
      }
    }
  }
  // Leftovers of writers that were killed mid-write; this writer owns the directory.
  for (const std::string& name : list_directory(run_dir)) {
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 && name.rfind("step-", 0) == 0) {
      try {
        remove_file(join_path(run_dir, name));
      } catch (const std::system_error& e) {
        log_warn("cannot delete the leftover " + join_path(run_dir, name) + ": " + e.code().message());
      }
    }
  }
}

// What a checkpoint file holds, about: its tensors and texts (HDF5's own bookkeeping is small).
std::uint64_t snapshot_bytes(const CheckpointState& state) {
  std::uint64_t bytes = state.settings_toml.size() + state.topology_text.size() + state.model_config_json.size();
  for (const auto& [name, tensor] : state.tensors) bytes += tensor.nbytes();
  for (const auto& [name, text] : state.texts) bytes += text.size();
  for (const auto& [name, text] : state.tokenizer_files) bytes += text.size();
  return bytes;
}

void write_snapshot(const std::string& run_dir, int keep, CheckpointWriter::Snapshot& snapshot) {
  std::string copied;
#ifdef TOPOTRAIN_CUDA
  double copy_seconds = 0;
  for (auto& c : snapshot.copies) {
    c.done->synchronize();
    copy_seconds = std::max(copy_seconds, c.begin->elapsed_time(*c.done) / 1e3);
  }
  if (!snapshot.copies.empty()) copied = cat(", copied from the device in ", fixed_point(copy_seconds, 2), " s");
#endif
  const auto started = std::chrono::steady_clock::now();
  const std::string name = CheckpointWriter::file_name(snapshot.state.step);
  const std::string final_path = join_path(run_dir, name);
  const std::string temporary = final_path + ".tmp";
  fault_inject_delay("TOPOTRAIN_FAULT_SLOW_CHECKPOINT");
  try {
    write_checkpoint_file(temporary, snapshot.state);
    fault_inject_disk_full(snapshot.state.step, "cannot flush " + temporary);
    fsync_path(temporary);
    rename_file(temporary, final_path);
    fsync_path(run_dir);
  } catch (const std::exception& e) {
    // A full disk or a quota is named with the space it took; the partial file goes, so that
    // the space it held is free again and nothing but `latest`'s checkpoint looks like one.
    const int error = errno;
    try {
      remove_file(temporary);
    } catch (const std::system_error&) {
      // what made the write fail may also refuse the removal: the message above is the one to read
    }
    const std::string said = e.what();
    throw std::runtime_error(cat("cannot write ", final_path, " (", said, ")",
                                 write_failure_detail(error, run_dir, snapshot_bytes(snapshot.state), said),
                                 "; the run directory's latest checkpoint is unchanged. Free space there, keep "
                                 "fewer checkpoints (checkpoint.keep) or point checkpoint.dir at a file system with "
                                 "room, then resume with --resume auto"));
  }
  write_file_atomically(join_path(run_dir, kLatestFileName), name + "\n");
  // From the one rank that writes the run's checkpoints, whatever its rank number.
  log_info_here(cat("checkpoint ", final_path, " written: ",
                    fixed_point(static_cast<double>(file_size(final_path)) / (1 << 30), 2), " GiB in ",
                    fixed_point(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 1),
                    " s; the snapshot held the host ", fixed_point(snapshot.stall_seconds * 1e3, 1), " ms", copied));
  prune(run_dir, keep, final_path);
}

}  // namespace

std::int64_t CheckpointWriter::reserve(const std::map<std::string, at::Tensor>& tensors) {
  wait();
  auto snapshot = std::make_shared<Snapshot>();
  std::int64_t total = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;  // each tensor's offset and bytes in the block
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) throw std::runtime_error("checkpoint: tensor '" + name + "' is undefined");
    snapshot->devices.push_back(tensor.device());
    const std::int64_t bytes = tensor.numel() * static_cast<std::int64_t>(tensor.element_size());
    spans.emplace_back(total, bytes);
    total += (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    snapshot->pinned = snapshot->pinned || (pinned_ && tensor.is_cuda());
#ifdef TOPOTRAIN_CUDA
    const c10::DeviceIndex device = tensor.device().index();
    if (tensor.is_cuda() && std::none_of(snapshot->side_streams.begin(), snapshot->side_streams.end(),
                                         [&](const auto& s) { return s.first == device; }))
      snapshot->side_streams.emplace_back(device, c10::cuda::getStreamFromPool(false, device));
#endif
  }
  const std::int64_t size = std::max<std::int64_t>(total, 1);
  snapshot->block = snapshot->pinned ? compat::pinned_host_bytes(size) : at::empty({size}, at::kByte);
  auto span = spans.begin();
  for (const auto& [name, tensor] : tensors) {
    const auto [offset, bytes] = *span++;
    snapshot->buffers[name] = snapshot->block.narrow(0, offset, bytes).view(tensor.scalar_type()).view(tensor.sizes());
  }
  snapshot->bytes = total;
  snapshot_ = std::move(snapshot);
  return total;
}

std::int64_t CheckpointWriter::buffer_bytes() const { return snapshot_ ? snapshot_->bytes : 0; }
bool CheckpointWriter::buffers_pinned() const { return snapshot_ && snapshot_->pinned; }

CheckpointWriter::CheckpointWriter(std::string run_dir, int keep, bool pinned)
    : run_dir_(std::move(run_dir)), keep_(keep), pinned_(pinned && compat::kCudaBuild) {
  try {
    make_directories(run_dir_);
  } catch (const std::system_error& e) {
    throw ConfigError("cannot create checkpoint directory " + run_dir_ + ": " + e.code().message());
  }
}

CheckpointWriter::~CheckpointWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    log_error(e.what());
  }
}

std::string CheckpointWriter::set_aside_after(std::int64_t step, const std::string& resumed) {
  std::vector<std::string> later;
  for (const auto& [file_step, path] : checkpoint_files(run_dir_))
    if (file_step > step) later.push_back(path);
  if (later.empty()) return "";
  const std::string folder = superseded_folder(run_dir_, step);
  std::string names;
  try {
    // `latest` first: a process killed among the moves then resumes from `resumed` again,
    // and moves the rest.
    if (same_file(parent_directory(resumed), run_dir_))
      write_file_atomically(join_path(run_dir_, kLatestFileName), topotrain::file_name(resumed) + "\n");
    make_directories(folder);
    for (const std::string& path : later) {
      rename_file(path, join_path(folder, topotrain::file_name(path)));
      names += (names.empty() ? "" : ", ") + topotrain::file_name(path);
    }
    fsync_path(folder);
    fsync_path(run_dir_);
  } catch (const std::system_error& e) {
    throw ConfigError(cat("resuming from ", resumed, " at step ", step, ", cannot move ", run_dir_,
                          "'s checkpoints of later steps into ", folder, ": ", e.what(),
                          "; move every step-*.h5 above step ", step, " out of ", run_dir_, " and resume again"));
  }
  log_warn(cat("resuming from ", resumed, " at step ", step, " abandons ", later.size(), " later checkpoint",
               later.size() == 1 ? "" : "s", " of ", run_dir_, " (", names, "): moved to ", folder,
               ", where this run's checkpoints cannot replace or mix with them; delete that folder once they are not "
               "needed"));
  return folder;
}

std::string CheckpointWriter::file_name(std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld.h5", static_cast<long long>(step));
  return name;
}

double CheckpointWriter::save(const CheckpointState& state) {
  const auto started = std::chrono::steady_clock::now();
  wait();
  if (!snapshot_ || !same_layout(*snapshot_, state.tensors)) reserve(state.tensors);
  Snapshot& snapshot = *snapshot_;
  snapshot.state = state;  // the metadata; the tensor handles are replaced by the buffers
  snapshot.state.tensors = snapshot.buffers;
#ifdef TOPOTRAIN_CUDA
  snapshot.copies.clear();
  snapshot.pending.clear();
#endif
  for (const auto& [name, tensor] : state.tensors) {
    at::Tensor& buffer = snapshot.buffers.at(name);
    const at::Tensor source = tensor.detach();
#ifdef TOPOTRAIN_CUDA
    if (source.is_cuda()) {
      copy_from_device(snapshot, source, buffer);
      continue;
    }
#endif
    buffer.copy_(source);
  }
#ifdef TOPOTRAIN_CUDA
  snapshot.updates_unordered = !snapshot.copies.empty();
  snapshot.issued = snapshot.copies.empty();  // else the writer thread issues them first
#endif
  snapshot.stall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  writing_ = true;
  writing_step_ = state.step;
  worker_ = std::thread([this, shared = snapshot_] {
    try {
#ifdef TOPOTRAIN_CUDA
      if (!shared->issued) issue_device_copies(*shared);
#endif
      write_snapshot(run_dir_, keep_, *shared);
    } catch (const std::exception& e) {
      error_ = std::make_exception_ptr(
          std::runtime_error(cat("checkpoint of step ", shared->state.step, " in ", run_dir_, " failed: ", e.what())));
    }
    writing_ = false;
  });
  return snapshot.stall_seconds;
}

bool CheckpointWriter::snapshot_unordered() const {
#ifdef TOPOTRAIN_CUDA
  return snapshot_ && snapshot_->updates_unordered;
#else
  return false;
#endif
}

void CheckpointWriter::order_updates_after_snapshot() {
  if (!snapshot_unordered()) return;
#ifdef TOPOTRAIN_CUDA
  Snapshot& snapshot = *snapshot_;
  {
    // The host waits until the writer thread has issued the last chunk, about the copy's
    // time less a chunk's; the device then waits for that chunk.
    std::unique_lock<std::mutex> lock(snapshot.issued_mutex);
    snapshot.issued_changed.wait(lock, [&] { return snapshot.issued; });
  }
  for (auto& c : snapshot.copies) c.done->block(c10::cuda::getCurrentCUDAStream(c.device));
  snapshot.updates_unordered = false;
#endif
}

void CheckpointWriter::wait() {
  if (worker_.joinable()) worker_.join();
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

}  // namespace topotrain
