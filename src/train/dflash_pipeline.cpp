#include "topotrain/train/dflash_pipeline.h"

#include "topotrain/core/log.h"
#include "topotrain/train/run_setup.h"

namespace topotrain {

comm::LinkConfig link_config(const Topology& topology, const Device& device) {
  comm::LinkConfig link;
  link.transport = topology.links.hidden_states;
  link.queue_depth = topology.links.queue_depth;
  link.device = device;
  return link;
}

TimingLogConfig pipeline_timing_config(const RunConfig& run, const torch::Device& device) {
  TimingLogConfig config = timing_log_config(run.cadences, device);
  config.extra_fields = kPipelineExtraFields;
  return config;
}

StepMetrics row_of(double tokens) {
  StepMetrics metrics;
  metrics.tokens = tokens;
  metrics.extra.assign(kPipelineExtraFields.size(), StepMetrics::kUnset);
  return metrics;
}

void set_draft_quality(StepMetrics& metrics, const StepReport& report) {
  const DraftQuality* sources[2] = {&report.draft, &report.eval_draft};
  for (std::size_t s = 0; s < 2; ++s) {
    if (sources[s]->empty()) continue;
    metrics.extra[3 * s] = sources[s]->tau();
    metrics.extra[3 * s + 1] = sources[s]->mode_tau();
    metrics.extra[3 * s + 2] = sources[s]->slot_mode_tau();
  }
  if (report.eval_decoded_tau) metrics.extra[6] = *report.eval_decoded_tau;
  if (report.eval_decoded_trivial_tau) metrics.extra[7] = *report.eval_decoded_trivial_tau;
}

double payload_bytes_per_token(const model::DFlashConfig& config, const RunConfig& run, const torch::Device& device) {
  const std::size_t tensors = config.resolved_taps().size() + (config.loss == model::DFlashLoss::kl ? 1 : 0);
  const double columns = static_cast<double>(tensors) * static_cast<double>(config.target.hidden_size);
  return columns * static_cast<double>(c10::elementSize(compute_dtype(run.dtype, device)));
}

}  // namespace topotrain
