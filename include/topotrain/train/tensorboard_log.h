// A run's TensorBoard curves (log.tensorboard): the group's lead writes an event file
// (store/tensorboard_events.h) into <run_dir>/tensorboard/, one per launch, so that
// `tensorboard --logdir checkpoints/` shows every run and a resumed run's curves go on from
// its earlier launches' (a step that a resume repeats after a crash appears again). Every
// event is flushed as it is written. Tags (kTensorBoardTags; README.md lists the same):
//   train/..., perf/..., draft/...  the step's values (step_values.h) of metrics.jsonl, under
//                                   their group: train/loss, perf/tokens_per_s, ...; a draft
//                                   slot's accuracy is draft/accuracy/<slot> (1..B-1)
//   perf/queue_depth                a drafter's hidden-state queue at the step's end
//   phase/<phase>, phase/other      the share of the step's wall time each phase took on this
//                                   rank, as in timings.h5 (device time on CUDA, where the
//                                   shares may add up to more than 1: phases of different
//                                   streams overlap); written when the step's times are
//                                   known, a step later on CUDA
// Values that are not finite are left out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topotrain/store/phase_timer.h"
#include "topotrain/store/tensorboard_events.h"
#include "topotrain/train/step_values.h"

namespace topotrain {

extern const std::vector<std::string> kTensorBoardTags;  // every tag the trainers write
constexpr const char* kTensorBoardDirName = "tensorboard";

class TensorBoardLog {
 public:
  // A new event file in <run_dir>/tensorboard/. Throws std::runtime_error naming it when it
  // cannot be created.
  explicit TensorBoardLog(const std::string& run_dir);

  // The step's values at `time` (Unix seconds), under their tags.
  void record_step(std::int64_t step, double time, const std::vector<StepValue>& values);
  // The phase shares and queue depth of a step whose times are known
  // (TimingLogConfig::on_record).
  void record_timing(const StepRecord& record);

  const std::string& path() const { return writer_.path(); }

 private:
  TensorBoardWriter writer_;
};

}  // namespace topotrain
