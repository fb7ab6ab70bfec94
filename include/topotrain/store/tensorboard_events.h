// A TensorBoard event file of scalars, written without TensorFlow: what
// `tensorboard --logdir` reads as a run's curves.
//
//   TensorBoardWriter writer(join_path(run_dir, "tensorboard"));
//   writer.add_scalars(step, unix_seconds, {{"train/loss", 3.2}, {"perf/mfu", 0.38}});
//
// Each writer makes the directory if needed and starts a new file in it,
// events.out.tfevents.<unix seconds>.<host>.<pid> (with ".<n>" appended should that name
// exist), so that every launch of a run adds a file beside the earlier ones: TensorBoard
// shows one directory's files as one run, ordered by step. The file is a sequence of
// TFRecords (uint64 little-endian length, its masked CRC-32C, the data, the data's masked
// CRC-32C; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8) of serialized tensorflow.Event
// messages: first one with file_version "brain.Event:2", then one per add_scalars call
// with wall_time, step and a Summary of simple_value scalars (float precision). Every call
// is flushed before it returns, so a crashed run keeps its curves up to its last step.
// Values that are not finite are left out (TensorBoard draws none of them usefully).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace topotrain {

struct Scalar {
  std::string tag;  // "group/name": TensorBoard groups charts by the part before the first '/'
  double value;
};

class TensorBoardWriter {
 public:
  // Throws std::runtime_error naming the file when it cannot be created.
  explicit TensorBoardWriter(const std::string& dir);

  // One event of `step` at `wall_time` (Unix seconds) with the finite ones of `scalars`;
  // nothing when none is finite. Throws std::runtime_error naming the file on a failed write.
  void add_scalars(std::int64_t step, double wall_time, const std::vector<Scalar>& scalars);

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::ofstream out_;
};

}  // namespace topotrain
