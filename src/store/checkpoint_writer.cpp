#include "topotrain/store/checkpoint_writer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <system_error>
#include <vector>

#ifdef TOPOTRAIN_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/log.h"
#include "topotrain/store/checkpoint_file.h"
#include "topotrain/store/run_dir_files.h"

namespace topotrain {
namespace {

// A host copy of the state, and what the writer thread waits for before reading it.
struct Snapshot {
  CheckpointState state;
#ifdef TOPOTRAIN_CUDA
  std::vector<std::shared_ptr<at::cuda::CUDAEvent>> copies_done;  // one per device copied from
#endif
};

std::unique_ptr<Snapshot> take_snapshot(const CheckpointState& source) {
  auto snapshot = std::make_unique<Snapshot>();
  CheckpointState& state = snapshot->state;
  state.step = source.step;
  state.ints = source.ints;
  state.reals = source.reals;
  state.texts = source.texts;
  state.settings_toml = source.settings_toml;
  state.topology_text = source.topology_text;
  state.model_identity = source.model_identity;
  state.model_config_json = source.model_config_json;
  state.model_config_source = source.model_config_source;
#ifdef TOPOTRAIN_CUDA
  std::vector<c10::DeviceIndex> devices;
#endif
  for (const auto& [name, tensor] : source.tensors) {
    if (!tensor.defined()) throw std::runtime_error("checkpoint: tensor '" + name + "' is undefined");
    const at::Tensor detached = tensor.detach();
#ifdef TOPOTRAIN_CUDA
    if (detached.is_cuda()) {
      // Pinned so that the copy is asynchronous; on the tensor's current stream, so it
      // is ordered before any later update of the tensor.
      at::Tensor host = at::empty(detached.sizes(), detached.options().device(at::kCPU).pinned_memory(true));
      host.copy_(detached, /*non_blocking=*/true);
      state.tensors[name] = host;
      if (std::find(devices.begin(), devices.end(), detached.device().index()) == devices.end())
        devices.push_back(detached.device().index());
      continue;
    }
#endif
    state.tensors[name] = detached.clone(at::MemoryFormat::Contiguous);
  }
#ifdef TOPOTRAIN_CUDA
  for (c10::DeviceIndex device : devices) {
    auto event = std::make_shared<at::cuda::CUDAEvent>();
    event->record(c10::cuda::getCurrentCUDAStream(device));
    snapshot->copies_done.push_back(event);
  }
#endif
  return snapshot;
}

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

void write_snapshot(const std::string& run_dir, int keep, Snapshot& snapshot) {
#ifdef TOPOTRAIN_CUDA
  for (auto& event : snapshot.copies_done) event->synchronize();
#endif
  const auto started = std::chrono::steady_clock::now();
  const std::string name = CheckpointWriter::file_name(snapshot.state.step);
  const std::string final_path = join_path(run_dir, name);
  const std::string temporary = final_path + ".tmp";
  write_checkpoint_file(temporary, snapshot.state);
  fsync_path(temporary);
  rename_file(temporary, final_path);
  fsync_path(run_dir);
  write_file_atomically(join_path(run_dir, "latest"), name + "\n");
  // From the one rank that writes the run's checkpoints, whatever its rank number.
  log_info_here(cat("checkpoint ", final_path, " written: ",
                    fixed_point(static_cast<double>(file_size(final_path)) / (1 << 30), 2), " GiB in ",
                    fixed_point(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 1),
                    " s"));
  prune(run_dir, keep, final_path);
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string run_dir, int keep) : run_dir_(std::move(run_dir)), keep_(keep) {
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

std::string CheckpointWriter::file_name(std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld.h5", static_cast<long long>(step));
  return name;
}

void CheckpointWriter::save(const CheckpointState& state) {
  wait();
  std::shared_ptr<Snapshot> snapshot = take_snapshot(state);
  worker_ = std::thread([this, snapshot] {
    try {
      write_snapshot(run_dir_, keep_, *snapshot);
    } catch (const std::exception& e) {
      error_ = std::make_exception_ptr(
          std::runtime_error(cat("checkpoint of step ", snapshot->state.step, " in ", run_dir_, " failed: ", e.what())));
    }
  });
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
