#include "topotrain/train/moe_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/model/causal_lm.h"
#include "topotrain/model/config.h"
#include "topotrain/model/lm_loss.h"
#include "topotrain/model/model_cost.h"
#include "topotrain/torch_compat.h"
#include "topotrain/train/budget_probe.h"
#include "topotrain/train/held_out_eval.h"
#include "topotrain/train/job_exit.h"
#include "topotrain/train/run_input_checks.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/training_checkpoint.h"
#include "topotrain/train/training_session.h"

namespace topotrain {
namespace {

model::CausalLM build_model(const JobContext& context, const torch::Device& device) {
  const RunConfig& config = context.config;
  // Identical initialisation on every rank (same seed); the session broadcasts rank 0's
  // weights anyway.
  torch::manual_seed(config.step.seed);
  model::CausalLM net(config.model);
  load_model_weights(context.runtime, config.weights, *net);
  net->to(device);
  net->set_compute_dtype(compute_dtype(config.dtype, device));
  net->set_expert_layout(config.expert_layout);
  if (context.runtime.rank() == 0) {
    log_info(model::describe(config.model));
    log_info(cat("compute ", net->compute_dtype(), " with fp32 master weights and AdamW state; attention ",
                 model::to_string(net->attention_backend()), ", experts ", model::to_string(net->expert_backend()),
                 " in ", model::to_string(net->expert_layout()),
                 ", norms/rotary/SwiGLU/loss ", net->elementwise_backend(), ", device ", compat::device_name(device)));
  }
  return net;
}

// The step's loss terms on this rank, on the device (read once, by the agreement). The LM
// loss is a sum over the step's trained targets (loss mask 1) divided by their global
// count, so that the summed gradient equals one process's mean over the union of all
// micro-batches; a step without any has no LM gradient (its count is taken as 1). The aux
// loss and the peak expert load are weighted by each micro-batch's share of the step's
// tokens, so that their sums over ranks are the step's token-weighted means.
struct LossSums {
  LossSums(const data::StepPlan& plan, const torch::Device& device)
      : global_targets(static_cast<double>(std::max<std::uint64_t>(1, plan.global_loss_targets))),
        global_tokens(static_cast<double>(plan.global_tokens)),
        lm(torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device))),
        aux(torch::zeros_like(lm)),
        load(torch::zeros_like(lm)) {}
  double global_targets, global_tokens;
  torch::Tensor lm, aux, load;

  StepSums step_sums() const { return {std::nullopt, {lm, aux, load}}; }  // a mean: no divisor
};

// LossSums summed over the ranks, by name.
struct AgreedLoss {
  explicit AgreedLoss(const std::vector<double>& sums) : lm(sums.at(0)), aux(sums.at(1)), load(sums.at(2)) {}
  double lm, aux, load;
};

void train_micro_batch(TrainingSession& session, model::CausalLMImpl& net, const PackedBatch& micro_batch,
                       const torch::Device& device, LossSums& sums) {
  // On CUDA the prefetcher copied the batch on its own stream (its spans are the step's
  // h2d); here it only changes hands.
  PackedBatch batch = [&] {
    std::optional<PhaseTimer::Scope> t;
    if (!device.is_cuda()) t.emplace(session.scope(Phase::h2d));
    return micro_batch.to(device, /*non_blocking=*/true);
  }();
  torch::Tensor loss;
  {
    auto t = session.scope(Phase::forward);
    model::BackboneOutput out = net.forward_backbone(batch);
    model::LmLoss lm = model::lm_loss(net, out.hidden, batch);
    lm.loss_sum = session.fault_inject_nonfinite(lm.loss_sum);
    const double share = static_cast<double>(batch.num_tokens()) / sums.global_tokens;
    loss = lm.loss_sum / sums.global_targets + out.aux_loss * (net.config().router_aux_loss_coef * share);
    sums.lm += lm.loss_sum.detach();
    sums.aux += out.aux_loss.detach() * share;
    sums.load += out.peak_expert_load * share;
  }
  auto t = session.scope(Phase::backward);
  loss.backward();
}

// The held-out loss after the step just trained (TrainingSession::evaluate_held_out).
double evaluate_held_out(TrainingSession& session, const HeldOutEval& held_out, model::CausalLMImpl& net,
                         MPI_Comm group) {
  return session
      .evaluate_held_out(
          "loss", [&] { return held_out.evaluate(net, group); },
          [](const HeldOutLoss& result) {
            return cat(": ", fixed_point(result.loss, 4), " (perplexity ", fixed_point(std::exp(result.loss), 2),
                       ") over ", result.targets, " targets of ", result.documents, " documents");
          })
      .loss;
}

}  // namespace

const JobSpec& moe_job() {
  static const JobSpec job{"moe_train", {"trainer"}, {"trainer"}};
  return job;
}

void check_moe_inputs(const RunFile& run, const RunConfig& config) {
  // Autograd keeps at least each layer's input to attention and to the MLP for backward.
  check_run_inputs(run, config, config.model, 2 * config.model.num_hidden_layers);
}

void train_moe(JobContext& context) {
  const RunConfig& config = context.config;
  Runtime& runtime = context.runtime;
  const torch::Device device = torch_device(runtime.device());
  const int world = runtime.world_size();
  at::set_num_threads(1);
  model::CausalLM net = build_model(context, device);
  const TrainingData data = load_training_data(config);
  const std::shared_ptr<const data::TokenDataset>& dataset = data.train;
  // train.token_budget = "auto": every launch measures it, before the session.
  std::optional<MeasuredBudget> measured;
  if (config.step.auto_budget)
    measured = probe_token_budget(language_model_stage(*net), config.step, budget_bounds(*dataset), device,
                                  runtime.role_comm(), runtime.role_comm());
  std::int64_t token_budget = measured ? measured->budget : config.step.token_budget;
  const int grad_accum = config.step.grad_accum;
  std::optional<HeldOutEval> held_out;
  if (data.held_out) held_out.emplace(data.held_out, config, token_budget, runtime.role_rank(), world, device);

  SessionSpec spec;
  spec.parameters = named_parameters_of(*net);
  spec.model_name = config.model.source;
  spec.snapshot = [&](const NamedParameters& parameters, const AdamW& optimizer, const TrainingState& state) {
    return snapshot(context.run, config.model, parameters, optimizer, state);
  };
  spec.length = training_length(config.length, static_cast<std::int64_t>(dataset->num_tokens()));
  spec.initial = initial_state(config.step.seed);
  TimingLogConfig timing = timing_log_config(config.cadences, device);
  timing.flops_per_token =
      3.0 * model::forward_flops_per_token(config.model, attention_context(config.data, *dataset, token_budget));
  timing.extra_fields = {"aux_loss", "eval_loss", "peak_expert_load"};
  spec.progress = progress_config_from(spec.length, world, device, timing.flops_per_token);
  TrainingSession session(context, std::move(spec));
  session.start(timing);
  TrainingState& state = session.state();
  adopt_training_set(state, training_set_identity(*dataset, config.data.path), config);
  if (measured) state.measured_budget = {measured->budget, measured->bytes_per_token()};
  auto prefetcher = make_step_prefetcher(dataset, config, token_budget, runtime.role_rank(), world, grad_accum,
                                         state.data, device);
  if (session.lead())
    log_start_block(session.start_block(
        {{"model", model_text(config.model)},
         {"data", cat(config.data.path, ": ", dataset->num_samples(), " documents, ", dataset->num_tokens(), " tokens",
                      data.held_out ? cat("; ", data.held_out->num_samples(), " held-out documents") : std::string())},
         {"budget", cat(world, " ranks x ", grad_accum, " micro-batches of ", token_budget, " tokens = ",
                        static_cast<std::int64_t>(world) * grad_accum * token_budget, " tokens per step")},
         {"length", session.length().describe()}}));

  // ---- the training loop: one optimizer step per iteration
  while (!session.done()) {
    session.begin_step();
    data::StepPlan plan = [&] {
      auto t = session.scope(Phase::data_wait);
      return prefetcher->next();
    }();
    LossSums sums(plan, device);
    for (int m = 0; m < grad_accum; ++m)
      session.accumulate(m, grad_accum, plan.micro_batches[m].num_tokens() > 0,
                         [&] { train_micro_batch(session, *net, plan.micro_batches[m], device, sums); });
    session.timer().add_gpu_spans(Phase::h2d, prefetcher->take_device_spans());  // the copies on its stream
    const comm::StepAgreement all = session.optimizer_step(sums.step_sums());
    if (all.out_of_memory()) {
      const std::optional<std::int64_t> halved =
          session.after_out_of_memory(all, token_budget, measured ? &*measured : nullptr);
      if (!halved) break;
      token_budget = *halved;  // retry the step: the same samples, packed smaller
      prefetcher.reset();
      prefetcher = make_step_prefetcher(dataset, config, token_budget, runtime.role_rank(), world, grad_accum,
                                        plan.position_before, device);
      continue;
    }
    if (session.failed()) break;
    const AgreedLoss agreed(all.sums);
    for (const auto& batch : plan.micro_batches) session.sample_log().record(batch);
    state.step += 1;
    state.tokens += static_cast<std::int64_t>(plan.global_tokens);
    state.data = plan.position_after;

    StepReport report;
    report.tokens = static_cast<std::int64_t>(plan.global_tokens);
    report.loss = agreed.lm / sums.global_targets;
    report.loss_weight = sums.global_targets;
    report.aux_loss = agreed.aux;
    if (config.model.num_moe_layers() > 0) report.peak_expert_load = agreed.load;
    if (held_out && held_out->due(state.step, session.done() || all.stop))
      report.eval_loss = evaluate_held_out(session, *held_out, *net, runtime.role_comm());
    // The timing log holds one row per rank and the report sums rows: this rank's tokens.
    StepMetrics metrics;
    for (const auto& batch : plan.micro_batches) metrics.tokens += static_cast<double>(batch.num_tokens());
    metrics.extra = {agreed.aux, report.eval_loss.value_or(StepMetrics::kUnset),
                     report.peak_expert_load.value_or(StepMetrics::kUnset)};
    session.end_step(report, metrics);
    if (all.stop) {
      log_info(cat("stopped on request after step ", state.step, "; resume with --resume auto"));
      break;
    }
  }
  session.finish();
  if (session.failure().code != 0) throw JobExit(session.failure().code, session.failure().message);
  log_info(cat("done: ", state.step, " steps, ", state.tokens, " tokens",
               session.skipped_steps() > 0 ? cat(" (", session.skipped_steps(), " steps skipped as not finite)")
                                           : std::string(),
               "; checkpoints and timings.h5 in ", config.run_dir));
}

}  // namespace topotrain
