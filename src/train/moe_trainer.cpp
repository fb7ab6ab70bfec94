#include "topotrain/train/moe_trainer.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>

#include "topotrain/comm/backend.h"
#include "topotrain/comm/grad_reducer.h"
#include "topotrain/comm/watchdog.h"
#include "topotrain/core/error.h"
#include "topotrain/core/fault_injection.h"
#include "topotrain/core/log.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/model/config.h"
#include "topotrain/model/lm_loss.h"
#include "topotrain/model/qwen3.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/store/checkpoint_writer.h"
#include "topotrain/store/timing_log.h"
#include "topotrain/torch_compat.h"
#include "topotrain/train/adamw.h"
#include "topotrain/train/grad_clip.h"
#include "topotrain/train/job_exit.h"
#include "topotrain/train/lr_schedule.h"
#include "topotrain/train/out_of_memory.h"
#include "topotrain/train/progress.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/sample_log.h"
#include "topotrain/train/step_profile.h"
#include "topotrain/train/training_checkpoint.h"

namespace topotrain {
namespace {

// The agreement every rank reaches once per step: the step's loss terms, whether any rank
// ran out of memory (and the first such rank), the first rank whose loss terms are not
// finite, whether any rank was asked to stop. Reaching it is the only host
// synchronisation of a step.
struct StepAgreement {
  double loss_sum = 0;
  double aux_sum = 0;
  int oom_rank = -1;
  std::int64_t oom_peak = 0;
  int nonfinite_rank = -1;
  bool stop = false;
};

StepAgreement agree(MPI_Comm world, const StepAgreement& mine) {
  // First ranks travel under MIN (INT64_MAX: none); "stop" under MIN as 0.
  auto rank_or_none = [](int rank) { return rank >= 0 ? std::int64_t{rank} : INT64_MAX; };
  auto rank_of = [](std::int64_t v) { return v == INT64_MAX ? -1 : static_cast<int>(v); };
  double sums[2] = {mine.loss_sum, mine.aux_sum};
  std::int64_t mins[3] = {rank_or_none(mine.oom_rank), rank_or_none(mine.nonfinite_rank), mine.stop ? 0 : 1};
  std::int64_t peak = mine.oom_rank >= 0 ? mine.oom_peak : 0;
  comm::all_reduce_in_place(sums, 2, MPI_DOUBLE, MPI_SUM, world, "MPI_Iallreduce (step agreement)");
  comm::all_reduce_in_place(mins, 3, MPI_INT64_T, MPI_MIN, world, "MPI_Iallreduce (step agreement)");
  comm::all_reduce_in_place(&peak, 1, MPI_INT64_T, MPI_MAX, world, "MPI_Iallreduce (step agreement)");
  StepAgreement all;
  all.loss_sum = sums[0];
  all.aux_sum = sums[1];
  all.oom_rank = rank_of(mins[0]);
  all.oom_peak = peak;
  all.nonfinite_rank = rank_of(mins[1]);
  all.stop = mins[2] == 0;
  return all;
}

}  // namespace

void check_moe_inputs(const RunFile& run) {
  // Autograd keeps at least each layer's input to attention and to the MLP for backward.
  const model::ModelConfig model = model_config_from(run.settings);
  check_run_inputs(run, model, 2 * model.num_hidden_layers);
}

void train_moe(JobContext& context) {
  Runtime& runtime = context.runtime;
  const Settings& settings = context.run.settings;
  const torch::Device device = torch_device(runtime.device());
  const int world = runtime.world_size();
  at::set_num_threads(1);

  // ---- model: identical initialisation on every rank (same seed), then rank 0's weights
  // are broadcast anyway, as DDP does, so that no rank trains a different model.
  model::ModelConfig model_config = model_config_from(settings);
  torch::manual_seed(static_cast<std::uint64_t>(settings.integer("train.seed")));
  model::Qwen3CausalLM net(model_config);
  load_model_weights(runtime, settings, *net);
  net->to(device);
  net->set_compute_dtype(compute_dtype_from(settings, device));
  const NamedParameters parameters = named_parameters_of(*net);
  auto backend = comm::make_backend(runtime.role_comm(), runtime.device());
  for (auto& [name, p] : parameters) backend->broadcast(p.data(), 0);
  if (runtime.rank() == 0) {
    log_info(model::describe(model_config));
    log_info(cat("compute ", net->compute_dtype(), " with fp32 master weights and AdamW state; attention ",
                 model::to_string(net->attention_backend()), ", experts ", model::to_string(net->expert_backend()),
                 ", norms/rotary/SwiGLU/loss ", net->elementwise_backend(), ", device ", compat::device_name(device)));
  }

  // ---- data: the step planner deals the global sample stream to the ranks.
  auto dataset = load_dataset(settings, model_config);
  const TrainingLength length = training_length(settings, *dataset);
  AdamW optimizer(parameters, adamw_config_from(settings));
  const LrSchedule schedule = lr_schedule_from(settings, length);

  // ---- resume
  const std::string run_dir = run_directory(context.run);
  TrainingState state = initial_state(settings);
  if (auto path = CheckpointReader::resolve_resume(run_dir, context.options.resume)) {
    CheckpointState checkpoint = CheckpointReader::load(*path, expectations_for(model_config.source, parameters, optimizer));
    restore(checkpoint, parameters, optimizer, state);
    log_info(cat("resumed from ", *path, " at step ", state.step, ", ", state.tokens, " tokens, sample ",
                 state.data.consumed_samples, " of epoch ", state.data.epoch));
  }

  std::int64_t token_budget = settings.integer("train.token_budget");
  const int grad_accum = static_cast<int>(settings.integer("train.grad_accum"));
  auto prefetcher = make_step_prefetcher(dataset, settings, token_budget, runtime.role_rank(), world, grad_accum,
                                         state.data, device);

  comm::GradReducer reducer(parameters, *backend, grad_reducer_config_from(settings));
  reducer.zero_grad();

  TimingLogConfig timing_config = timing_log_config_from(settings, device);
  timing_config.flops_per_token =
      3.0 * model::forward_flops_per_token(model_config, attention_context_from(settings, *dataset, token_budget));
  timing_config.extra_fields = {"aux_loss"};
  TimingLog timings(run_dir, runtime.world(), runtime.role(), timing_config);
  std::unique_ptr<CheckpointWriter> writer;
  if (runtime.rank() == 0) writer = std::make_unique<CheckpointWriter>(run_dir, settings.integer("checkpoint.keep"));
  ProgressMeter progress(progress_config_from(length, world, device, timing_config.flops_per_token));
  const std::int64_t log_every = settings.integer("log.every");
  const std::int64_t checkpoint_every = settings.integer("checkpoint.every_steps");
  const double aux_coef = model_config.router_aux_loss_coef;
  const double clip = settings.real("train.clip");
  const bool shrink_on_oom = oom_policy_is_shrink(settings);
  const bool skip_nonfinite = settings.boolean("train.skip_nonfinite");
  std::int64_t skipped_steps = 0;
  SampleLog sample_log(settings, run_dir, runtime.rank());
  StepProfile profile(settings, run_dir, runtime.rank(), device);
  PhaseTimer& timer = timings.timer();
  comm::Watchdog watchdog(runtime, runtime.role_comm(), settings.real("train.hang_timeout_s"));
  const std::int64_t first_step = state.step + 1;

  auto save_checkpoint = [&]() {
    auto t = timer.scope(Phase::checkpoint);
    if (writer) writer->save(snapshot(context.run, model_config, parameters, optimizer, state));
  };

  log_info(cat("training ", length.describe(), " with ", world, " ranks x ", grad_accum, " micro-batches of ",
               token_budget, " tokens; run directory ", run_dir));

  while (!length.done(state)) {
    const auto started = PhaseTimer::Clock::now();
    timer.begin_step(state.step + 1);
    watchdog.begin_step(state.step + 1,
                        state.step + 1 == first_step || comm::near_checkpoint(state.step + 1, checkpoint_every));
    fault_inject_stall(runtime.rank(), state.step + 1);
    auto profiled = profile.step(state.step + 1);
    compat::reset_peak_allocated_bytes(device);

    data::StepPlan plan = [&] {
      auto t = timer.scope(Phase::data_wait);
      return prefetcher->next();
    }();
    // The loss is a sum over the step's trained targets (loss mask 1) divided by their
    // global count, so that the summed gradient equals one process's mean over the union
    // of all micro-batches. A step without any (every token masked out) has no LM gradient:
    // its count is taken as 1 so that the sum, 0, stays 0.
    const double global_targets = static_cast<double>(std::max<std::uint64_t>(1, plan.global_loss_targets));
    const double global_tokens = static_cast<double>(plan.global_tokens);

    StepAgreement mine;
    mine.stop = stop_requested();
    // Device scalars: read once per step, after the reducer, not once per micro-batch.
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
    torch::Tensor aux_sum = torch::zeros_like(loss_sum);
    for (int m = 0; m < grad_accum; ++m) {
      const bool last = m == grad_accum - 1;
      reducer.begin_micro_batch(last);
      if (mine.oom_rank >= 0) continue;  // still walk the schedule: the reducer must stay in step
      if (plan.micro_batches[m].num_tokens() == 0) continue;  // the data ended within the last step
      try {
        fault_inject_out_of_memory(runtime.rank(), state.step + 1);
        PackedBatch batch = [&] {
          auto t = timer.scope(Phase::h2d);
          return plan.micro_batches[m].to(device, /*non_blocking=*/true);
        }();
        torch::Tensor loss;
        {
          auto t = timer.scope(Phase::forward);
          model::BackboneOutput out = net->forward_backbone(batch);
          model::LmLoss lm = model::lm_loss(*net, out.hidden, batch);
          if (fault_injected("TOPOTRAIN_FAULT_NONFINITE", runtime.rank(), state.step + 1))
            lm.loss_sum = lm.loss_sum * std::numeric_limits<double>::quiet_NaN();
          const double share = static_cast<double>(batch.num_tokens()) / global_tokens;
          loss = lm.loss_sum / global_targets + out.aux_loss * (aux_coef * share);
          loss_sum += lm.loss_sum.detach();
          aux_sum += out.aux_loss.detach() * share;
        }
        auto t = timer.scope(Phase::backward);
        loss.backward();
      } catch (const std::exception& e) {
        if (!is_out_of_memory(e)) throw;
        mine.oom_rank = runtime.rank();
        mine.oom_peak = compat::peak_allocated_bytes(device);
        log_warn(cat("out of memory in micro-batch ", m, " of step ", state.step + 1, ": ", first_line(e.what())));
      }
    }
    {
      auto t = timer.scope(Phase::comm_wait);
      reducer.finish();
    }
    mine.loss_sum = loss_sum.item<double>();
    mine.aux_sum = aux_sum.item<double>();
    if (!std::isfinite(mine.loss_sum) || !std::isfinite(mine.aux_sum)) mine.nonfinite_rank = runtime.rank();
    StepAgreement all = agree(runtime.world(), mine);

    // A failed step still gets its row in the timing log (every rank, same count); a job
    // that ends on it leaves the last checkpoint as it was.
    StepMetrics failed;
    failed.extra = {StepMetrics::kUnset};
    auto end_job = [&](int code, const std::string& message) {
      timings.end_step(failed);
      timings.flush();
      if (writer) writer->wait();
      throw JobExit(code, message);
    };
    if (all.oom_rank >= 0) {
      reducer.zero_grad();
      compat::release_cached_memory(device);
      if (!shrink_on_oom || token_budget <= 1)
        end_job(3, out_of_memory_message(context, all.oom_rank, state.step + 1, token_budget, all.oom_peak,
                                         writer ? writer->run_dir() : run_dir));
      token_budget /= 2;
      if (runtime.rank() == 0)
        log_warn(cat("out of memory on rank ", all.oom_rank, " at step ", state.step + 1,
                   "; train.oom = \"shrink\": retrying the step with token_budget ", token_budget));
      prefetcher.reset();
      prefetcher = make_step_prefetcher(dataset, settings, token_budget, runtime.role_rank(), world, grad_accum,
                                        plan.position_before, device);
      timings.end_step(failed);
      continue;
    }

    // Only now is the step accepted: a step discarded after an out-of-memory trained nothing.
    for (const auto& batch : plan.micro_batches) sample_log.record(batch);
    double grad_norm = 0;
    const double lr = schedule.at(length.schedule_position(state));
    bool finite = all.nonfinite_rank < 0;
    {
      auto t = timer.scope(Phase::optimizer);
      grad_norm = clip_gradients(parameters, clip);
      // The norm of the reduced gradients is the same on every rank, so every rank skips
      // alike: a non-finite step never reaches the weights or the AdamW moments.
      finite = finite && std::isfinite(grad_norm);
      if (finite) optimizer.step(lr);
      reducer.zero_grad();
    }
    if (!finite) {
      const std::string what = cat(all.nonfinite_rank >= 0 ? cat("the loss on rank ", all.nonfinite_rank)
                                                           : cat("the gradient norm (", grad_norm, ")"),
                                   " is not finite at step ", state.step + 1);
      if (!skip_nonfinite)
        end_job(4, cat(what, "; no rank applied it. The last checkpoint in ", run_dir,
                       " is intact: resume with --resume auto after lowering train.lr or checking the data, or set "
                       "train.skip_nonfinite = true to skip such steps"));
      ++skipped_steps;
      if (runtime.rank() == 0)
        log_warn(cat(what, "; train.skip_nonfinite: step skipped (", skipped_steps, " so far)"));
    }
    state.step += 1;
    state.tokens += static_cast<std::int64_t>(plan.global_tokens);
    state.data = plan.position_after;

    StepReport report;
    report.step = state.step;
    report.tokens = static_cast<std::int64_t>(plan.global_tokens);
    report.loss = all.loss_sum / global_targets;
    report.loss_weight = global_targets;
    report.aux_loss = all.aux_sum;
    report.lr = lr;
    report.grad_norm = grad_norm;
    report.peak_memory = compat::peak_allocated_bytes(device);
    report.collectives = reducer.collectives();
    report.comm_seconds = timer.step_seconds(Phase::comm_wait);
    report.seconds = std::chrono::duration<double>(PhaseTimer::Clock::now() - started).count();
    progress.record(report, state.tokens);

    // The timing log holds one row per rank; the report sums rows, so each rank records
    // its own tokens, not the step's global count.
    std::int64_t my_tokens = 0;
    for (const auto& batch : plan.micro_batches) my_tokens += batch.num_tokens();
    StepMetrics metrics;
    metrics.tokens = static_cast<double>(my_tokens);
    metrics.loss = report.loss;
    metrics.lr = lr;
    metrics.grad_norm = grad_norm;
    metrics.peak_memory_bytes = static_cast<double>(report.peak_memory);
    metrics.collectives = static_cast<double>(report.collectives);
    metrics.extra = {all.aux_sum};
    const bool stopping = all.stop || length.done(state);
    if (checkpoint_every >= 0 && (stopping || (checkpoint_every > 0 && state.step % checkpoint_every == 0)))
      save_checkpoint();
    timings.end_step(metrics);
    if (runtime.rank() == 0 && (state.step % log_every == 0 || stopping)) log_info(progress.line());
    if (all.stop) {
      log_info(cat("stopped on request after step ", state.step, "; resume with --resume auto"));
      break;
    }
  }
  timings.flush();
  if (writer) writer->wait();
  log_info(cat("done: ", state.step, " steps, ", state.tokens, " tokens",
               skipped_steps > 0 ? cat(" (", skipped_steps, " steps skipped as not finite)") : std::string(),
               "; checkpoints and timings.h5 in ", run_dir));
}

}  // namespace topotrain
