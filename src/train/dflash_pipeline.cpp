#include "topotrain/train/dflash_pipeline.h"

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
  config.extra_fields = {"tau", "eval_tau"};
  return config;
}

StepMetrics row_of(double tokens) {
  StepMetrics metrics;
  metrics.tokens = tokens;
  metrics.extra = {StepMetrics::kUnset, StepMetrics::kUnset};
  return metrics;
}

}  // namespace topotrain
