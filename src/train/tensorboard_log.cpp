#include "topotrain/train/tensorboard_log.h"

#include <chrono>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"

namespace topotrain {
namespace {

// The tag of each step value (step_values.h): its metrics.jsonl key under a group.
const std::vector<std::pair<std::string, std::string>> kValueTags = {
    {"loss", "train/loss"},
    {"aux_loss", "train/aux_loss"},
    {"peak_expert_load", "train/peak_expert_load"},
    {"lr", "train/lr"},
    {"grad_norm", "train/grad_norm"},
    {"tokens", "train/tokens"},
    {"tokens_total", "train/tokens_total"},
    {"skipped", "train/skipped"},
    {"step_seconds", "perf/step_seconds"},
    {"tokens_per_s", "perf/tokens_per_s"},
    {"mfu", "perf/mfu"},
    {"memory_bytes", "perf/memory_bytes"},
    {"collectives", "perf/collectives"},
    {"starved_seconds", "perf/starved_seconds"},
    {"tau", "draft/tau"},
    {"tau_mode", "draft/tau_mode"},
    {"tau_slot_mode", "draft/tau_slot_mode"},
    {"eval_loss", "eval/loss"},
    {"eval_tau", "eval/tau"},
    {"eval_tau_mode", "eval/tau_mode"},
    {"eval_tau_slot_mode", "eval/tau_slot_mode"},
    {"eval_decoded_tau", "eval/decoded_tau"},
    {"eval_decoded_trivial_tau", "eval/decoded_trivial_tau"},
    {"draft_accuracy", "draft/accuracy"},            // per slot: draft/accuracy/<slot>
    {"eval_draft_accuracy", "eval/draft_accuracy"},  // per slot: eval/draft_accuracy/<slot>
};
constexpr const char* kSlotSuffix = "/<slot>";
constexpr const char* kQueueDepthTag = "perf/queue_depth";
constexpr const char* kOtherPhaseTag = "phase/other";

std::string phase_tag(std::size_t phase) { return cat("phase/", phase_names()[phase]); }

const std::string& tag_of(const std::string& name) {
  for (const auto& [value, tag] : kValueTags)
    if (value == name) return tag;
  throw std::logic_error(cat("step value '", name, "' has no TensorBoard tag: add it to kValueTags"));
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

const std::vector<std::string> kTensorBoardTags = [] {
  std::vector<std::string> tags;
  for (const auto& [value, tag] : kValueTags)
    tags.push_back(value == "draft_accuracy" || value == "eval_draft_accuracy" ? tag + kSlotSuffix : tag);
  tags.push_back(kQueueDepthTag);
  for (std::size_t p = 0; p < kPhaseCount; ++p) tags.push_back(phase_tag(p));
  tags.push_back(kOtherPhaseTag);
  return tags;
}();

TensorBoardLog::TensorBoardLog(const std::string& run_dir) : writer_(join_path(run_dir, kTensorBoardDirName)) {}

void TensorBoardLog::record_step(std::int64_t step, double time, const std::vector<StepValue>& values) {
  std::vector<Scalar> scalars;
  for (const StepValue& value : values) {
    const std::string& tag = tag_of(value.name);
    std::visit(
        [&](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::vector<double>>) {
            // Slot 0 is the anchor, never predicted: the first entry is slot 1.
            for (std::size_t slot = 0; slot < v.size(); ++slot) scalars.push_back({cat(tag, '/', slot + 1), v[slot]});
          } else {
            scalars.push_back({tag, static_cast<double>(v)});
          }
        },
        value.value);
  }
  writer_.add_scalars(step, time, scalars);
}

void TensorBoardLog::record_timing(const StepRecord& record) {
  std::vector<Scalar> scalars;
  if (record.wall > 0) {
    for (std::size_t p = 0; p < kPhaseCount; ++p) scalars.push_back({phase_tag(p), record.phase_seconds[p] / record.wall});
    scalars.push_back({kOtherPhaseTag, record.other_seconds() / record.wall});
  }
  scalars.push_back({kQueueDepthTag, record.metrics.queue_depth});  // NaN (left out) but in pipelines
  writer_.add_scalars(record.step, unix_seconds(), scalars);
}


}  // namespace topotrain
