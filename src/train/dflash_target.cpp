#include "topotrain/train/dflash_target.h"

#include <algorithm>

#include "topotrain/comm/hidden_state_link.h"
#include "topotrain/core/error.h"
#include "topotrain/core/fault_injection.h"
#include "topotrain/core/log.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/store/timing_log.h"
#include "topotrain/torch_compat.h"
#include "topotrain/train/dflash_pipeline.h"
#include "topotrain/train/out_of_memory.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/sample_log.h"
#include "topotrain/train/step_profile.h"
#include "topotrain/train/stream_cursor.h"

namespace topotrain {

Runtime::Outcome run_dflash_target(JobContext& context, model::Qwen3CausalLM& target,
                                   const model::DFlashConfig& config, const torch::Device& device) {
  Runtime& runtime = context.runtime;
  const Settings& settings = context.run.settings;
  const Topology& topology = context.run.topology;
  torch::NoGradGuard frozen;
  // Frozen: the weights are kept in the compute dtype itself (no fp32 masters, no casts).
  const torch::ScalarType dtype = compute_dtype_from(settings, device);
  target->to(device, dtype);
  target->set_compute_dtype(dtype);
  const std::vector<std::int64_t> taps = config.resolved_taps();
  const bool send_final_hidden = config.loss == model::DFlashLoss::kl;

  auto dataset = load_dataset(settings, config.target);
  const int drafter = topology.drafter_of(runtime.rank());
  const data::SampleStream stream = stream_of(topology, runtime.rank());
  const data::DataPosition start = receive_start_position(topology, runtime.rank());
  const std::int64_t token_budget = settings.integer("train.token_budget");
  auto prefetcher = make_step_prefetcher(dataset, settings, token_budget, 0, 1, 1, start, device, stream);

  TimingLogConfig timing_config = pipeline_timing_config(settings, device);
  timing_config.flops_per_token =
      model::forward_flops_per_token(config.target, attention_context_from(settings, *dataset, token_budget));
  const std::string run_dir = run_directory(context.run);
  TimingLog timings(run_dir, runtime.world(), runtime.role(), timing_config);
  PhaseTimer& timer = timings.timer();
  comm::HiddenStateSender sender(MPI_COMM_WORLD, {drafter, topology.targets_of(drafter)},
                                 link_config(topology, runtime.device()));
  SampleLog sample_log(settings, run_dir, runtime.rank());  // what this target sent
  StepProfile profile(settings, run_dir, runtime.rank(), device);

  Runtime::Outcome outcome;
  double forward_seconds = 0, blocked_seconds = 0;
  std::int64_t sent = 0, tokens = 0;
  while (!sender.stop_requested() && !stop_requested()) {
    timer.begin_step(sent + 1);
    fault_inject_stall(runtime.rank(), sent + 1);
    auto profiled = profile.step(sent + 1);
    data::StepPlan plan = [&] {
      auto t = timer.scope(Phase::data_wait);
      return prefetcher->next();
    }();
    if (plan.global_tokens == 0) {
      timer.discard_step();  // the stream ended after train.epochs: nothing sent, not a step
      break;
    }
    const data::DataPosition& after = plan.position_after;
    comm::PackedHiddenBatch packed;
    packed.packed = std::move(plan.micro_batches.front());
    const PackedBatch& batch = packed.packed;
    try {
      fault_inject_out_of_memory(runtime.rank(), sent + 1);
      auto t = timer.scope(Phase::forward);
      const auto started = PipelineClock::now();
      model::BackboneOutput out = target->forward_backbone(batch, taps);
      if (send_final_hidden) out.taps.push_back(out.hidden);
      packed.hidden = torch::cat(out.taps, -1).contiguous();
      compat::synchronize(device);  // phases are CPU-timed: end this one with its kernels
      forward_seconds += seconds_since(started);
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
      log_warn(cat("out of memory in the forward of batch ", sent + 1, ": ", first_line(e.what())));
      outcome = {3, out_of_memory_message(context, runtime.rank(), sent + 1, token_budget,
                                          compat::peak_allocated_bytes(device), run_dir)};
      timings.end_step(row_of(0));
      break;
    }
    packed.cursor = encode_cursor({stream.index, after});
    {
      auto t = timer.scope(Phase::queue_wait);  // blocks while the drafter's queue is full
      const auto started = PipelineClock::now();
      sender.send(packed);
      blocked_seconds += seconds_since(started);
    }
    sample_log.record(batch);
    ++sent;
    tokens += batch.num_tokens();
    timings.end_step(row_of(static_cast<double>(batch.num_tokens())));
  }
  sender.close(outcome.code != 0 ? "a target ran out of memory" : "");
  const double busy = forward_seconds + blocked_seconds;
  log_info_here(cat("target stream ", stream.index, " done: ", sent, " batches, ", tokens, " tokens, ",
                    tokens / std::max(forward_seconds, 1e-9) / 1e3, " Ktok/s in forward; idle on a full queue ",
                    static_cast<int>(100 * blocked_seconds / std::max(busy, 1e-9)), "%"));
  timings.flush();
  return outcome;
}

}  // namespace topotrain
