// Saves checkpoints without stalling training.
//
// The snapshot: one set of host buffers sized to the state, allocated once (reserve(), or
// the first save) and reused by every checkpoint. For CUDA tensors they are pinned (one
// exact-size allocation), and the copies run on a side stream that first waits, by an event
// that save() records, for the work already enqueued on the tensor's current stream (the
// optimizer step that produced it); save() then returns: the host does not wait, and the
// next step's forward and backward run while the copies do. The writer thread issues them in
// chunks, never more than 64 MiB queued, so that what the device orders behind
// copies in flight (another device-to-host copy, an allocation) waits for a chunk, not for
// the whole snapshot. Before the tensors change in place again,
// order_updates_after_snapshot() makes the current stream wait for those copies (the host
// waits until the last chunk is issued, the device for the rest; snapshot_unordered() says
// whether one is due, so that the trainer can time it as the checkpoint's). Without pinned
// buffers (pinned = false) the copies block the host until they are done; CPU tensors are
// copied by the host.
//
// The write: the background thread then waits for the copies, writes `step-00000100.h5.tmp`,
// fsyncs it, renames it to `step-00000100.h5`, points `latest` at it (a one-line text file
// replaced by rename), deletes all but the newest `keep` checkpoints, and logs the file's
// path and size, the write time, the snapshot's copy time and how long it held the host.
//
// While a write is in flight the buffers are its: writing() says so, and a trainer whose
// checkpoint falls due then defers it to a later step instead of waiting; save() called
// during a write waits for it (the end of a run: no checkpoint is dropped).
//
// Crash safety: a file named step-*.h5 only ever appears by rename after fsync, and
// `latest` only names such files, so a process killed at any moment leaves the previous
// checkpoint resumable.
//
// One run per directory: a resume from an earlier step than the directory's newest checkpoint
// moves the later ones aside (set_aside_after), so that pruning, which keeps the highest steps,
// and `latest` see only the resumed run's.
//
// One writer per run directory (one rank writes; others pass their state to it).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "topotrain/store/checkpoint_state.h"

namespace topotrain {

class CheckpointWriter {
 public:
  // keep <= 0 keeps every checkpoint. pinned: snapshot CUDA tensors into pinned memory
  // (false: pageable, whose copies stall). Creates run_dir.
  CheckpointWriter(std::string run_dir, int keep, bool pinned = true);
  // Waits for the write in flight; logs (does not throw) its error.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Allocates the snapshot buffers for tensors shaped like `tensors` now rather than at the
  // first save (a 6 GB pinned allocation takes a second or more). Returns their bytes.
  std::int64_t reserve(const std::map<std::string, at::Tensor>& tensors);
  std::int64_t buffer_bytes() const;
  bool buffers_pinned() const;  // the buffers are pinned (only where CUDA tensors are snapshot)

  // Snapshots `state` into the buffers and writes it as step-<state.step>.h5 in the
  // background; waits first for a write in flight. Returns the seconds the caller was held
  // (the host's stall). Throws the previous save's error, if it failed.
  double save(const CheckpointState& state);
  // Orders the current stream of every device the last snapshot copied from after those
  // copies: call it before changing the saved tensors in place. Cheap when nothing is pending.
  void order_updates_after_snapshot();
  // A snapshot's device copies are not yet ordered before updates: the next
  // order_updates_after_snapshot() makes the device wait for them (never in a CPU build).
  bool snapshot_unordered() const;
  // A write is in flight (its buffers are taken), and of which step.
  bool writing() const { return writing_.load(); }
  std::int64_t writing_step() const { return writing_step_; }
  // Waits for the write in flight; throws its error (once).
  void wait();

  // For a run resumed from `resumed`, the checkpoint of `step`, before its first save: moves
  // run_dir's checkpoint files of later steps (a line of steps the resume abandons, or files
  // that could not be read) into a new folder run_dir/superseded-after-step-<step>[-N],
  // points `latest` at `resumed` when that lies in run_dir, and logs a warning naming them
  // and the folder. Otherwise pruning would delete this run's checkpoints in favour of those
  // higher steps, and a resume whose `latest` is lost would take them. Returns the folder;
  // empty when nothing was later.
  std::string set_aside_after(std::int64_t step, const std::string& resumed);

  static std::string file_name(std::int64_t step);  // "step-00000100.h5"
  const std::string& run_dir() const { return run_dir_; }

  struct Snapshot;  // the buffers and the save in flight (checkpoint_writer.cpp)

 private:
  std::string run_dir_;
  int keep_;
  bool pinned_;
  std::shared_ptr<Snapshot> snapshot_;  // the buffers; shared with the writer thread
  std::thread worker_;
  std::atomic<bool> writing_{false};
  std::int64_t writing_step_ = -1;
  std::exception_ptr error_;  // set by worker_, read after join
};

}  // namespace topotrain
