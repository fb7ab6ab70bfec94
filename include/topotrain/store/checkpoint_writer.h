// Saves checkpoints without stalling training.
//
// save() copies every tensor to host memory (CUDA tensors through pinned buffers, copied
// on the current stream, so later kernels cannot change them) and returns; a background
// thread writes `step-00000100.h5.tmp`, fsyncs it, renames it to `step-00000100.h5`,
// points `latest` at it (a one-line text file replaced by rename) and deletes all but the
// newest `keep` checkpoints, and logs the file's path, size and write time. The next save()
// first waits for the previous one.
//
// Crash safety: a file named step-*.h5 only ever appears by rename after fsync, and
// `latest` only names such files, so a process killed at any moment leaves the previous
// checkpoint resumable.
//
// One writer per run directory (one rank writes; others pass their state to it).
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <thread>

#include "topotrain/store/checkpoint_state.h"

namespace topotrain {

class CheckpointWriter {
 public:
  // keep <= 0 keeps every checkpoint. Creates run_dir.
  CheckpointWriter(std::string run_dir, int keep);
  // Waits for the write in flight; logs (does not throw) its error.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Snapshots `state` and writes it as step-<state.step>.h5 in the background. Throws
  // the previous save's error, if it failed.
  void save(const CheckpointState& state);
  // Waits for the write in flight; throws its error (once).
  void wait();

  static std::string file_name(std::int64_t step);  // "step-00000100.h5"
  const std::string& run_dir() const { return run_dir_; }

 private:
  std::string run_dir_;
  int keep_;
  std::thread worker_;
  std::exception_ptr error_;  // set by worker_, read after join
};

}  // namespace topotrain
