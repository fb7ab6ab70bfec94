#include "topotrain/train/dflash_target.h"

#include <algorithm>

#include "topotrain/comm/hidden_state_link.h"
#include "topotrain/comm/watchdog.h"
#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/model/model_cost.h"
#include "topotrain/store/timing_log.h"
#include "topotrain/torch_compat.h"
#include "topotrain/train/dflash_pipeline.h"
#include "topotrain/train/held_out_eval.h"
#include "topotrain/train/out_of_memory.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/sample_log.h"
#include "topotrain/train/step_profile.h"
#include "topotrain/train/stream_cursor.h"
#include "topotrain/train/training_session.h"

namespace topotrain {
namespace {

class Target {
 public:
  Target(JobContext& context, model::CausalLM& target, const model::DFlashConfig& config,
         const torch::Device& device);
  Runtime::Outcome run();

 private:
  // One stream, from `start` until it ends.
  void send_stream(const StreamStart& start);
  // This target's share of the held-out documents, packed at `start`'s budget, then close.
  void send_held_out(const StreamStart& start);
  void pack_held_out_share(std::int64_t token_budget);
  // train.token_budget = "auto": this target's forward of the longest documents.
  BudgetStage budget_stage(const model::DFlashConfig& config);
  // The concatenated taps (+ final hidden) of `batch`.
  torch::Tensor captured_hidden(const PackedBatch& batch);
  // captured_hidden of `packed.packed` into `packed.hidden`; false after an
  // out-of-memory in its forward (batch `number` of the stream), with `reason` set for the
  // close and, unless the budget can shrink, the job's exit 3.
  bool hidden_states(comm::PackedHiddenBatch& packed, std::int64_t number, std::int64_t token_budget,
                     std::string& reason);

  JobContext& context_;
  const RunConfig& run_;
  const Topology& topology_;
  model::CausalLM& target_;
  torch::Device device_;
  int rank_;
  int drafter_;
  std::vector<std::int64_t> taps_;
  bool send_final_hidden_;
  data::SampleStream stream_;
  std::shared_ptr<const data::TokenDataset> dataset_;
  std::shared_ptr<const data::TokenDataset> held_out_;  // null without data.eval_*
  HeldOutShare held_out_share_;                         // packed at held_out_budget_
  std::int64_t held_out_budget_ = 0;
  std::optional<StreamStart> start_;
  std::unique_ptr<TimingLog> timings_;
  SampleLog sample_log_;  // what this target sent
  StepProfile profile_;
  Runtime::Outcome outcome_;
  std::int64_t sent_ = 0, tokens_ = 0;
};

Target::Target(JobContext& context, model::CausalLM& target, const model::DFlashConfig& config,
               const torch::Device& device)
    : context_(context),
      run_(context.config),
      topology_(context.run.topology),
      target_(target),
      device_(device),
      rank_(context.runtime.rank()),
      drafter_(topology_.drafter_of(rank_)),
      taps_(config.resolved_taps()),
      send_final_hidden_(config.loss == model::DFlashLoss::kl),
      stream_(stream_of(topology_, rank_)),
      sample_log_(run_.cadences.log_samples, run_.run_dir, rank_),
      profile_(run_.cadences.profile, run_.run_dir, rank_, device) {
  // Frozen: the weights are kept in the compute dtype itself (no fp32 masters, no casts).
  const torch::ScalarType dtype = compute_dtype(run_.dtype, device_);
  target_->to(device_, dtype);
  target_->set_compute_dtype(dtype);
  TrainingData data = load_training_data(run_);
  dataset_ = std::move(data.train);
  held_out_ = std::move(data.held_out);
  std::int64_t token_budget = run_.step.token_budget;
  if (run_.step.auto_budget) {
    token_budget = probe_token_budget(budget_stage(config), run_.step, budget_bounds(*dataset_), device_,
                                      context.runtime.role_comm(), MPI_COMM_WORLD)
                       .budget;
  }
  // Packed now, so that a set with nothing to evaluate is refused before training; the
  // drafters, which refuse it alike, have not waited on a target yet.
  if (held_out_) pack_held_out_share(token_budget);
  start_ = receive_stream_start(topology_, rank_);
  TimingLogConfig timing = pipeline_timing_config(run_, device_);
  timing.flops_per_token =
      model::backbone_forward_flops_per_token(config.target, attention_context(run_.data, *dataset_, token_budget));
  timings_ = open_timing_log(run_.run_dir, context.runtime, device_, std::move(timing));
}

BudgetStage Target::budget_stage(const model::DFlashConfig& config) {
  BudgetStage stage;
  stage.name = "target";
  stage.vocab_size = config.target.vocab_size;
  stage.worst_first = {longest_first};
  stage.run = [this](const PackedBatch& batch, std::mt19937_64&) {
    torch::NoGradGuard frozen;
    captured_hidden(batch);
  };
  // While it waits to send the batch it computed, the link holds the ones sent before.
  stage.later_bytes_per_token = comm::link_payloads(link_config(topology_, context_.runtime.device()), 1,
                                                    device_.is_cuda()).sender *
                                payload_bytes_per_token(config, run_, device_);
  return stage;
}

void Target::send_stream(const StreamStart& start) {
  torch::NoGradGuard frozen;
  auto prefetcher = make_step_prefetcher(dataset_, run_, start.token_budget, 0, 1, 1, start.position, device_, stream_);
  comm::HiddenStateSender sender(MPI_COMM_WORLD, {drafter_, topology_.targets_of(drafter_)},
                                 link_config(topology_, context_.runtime.device()));
  PhaseTimer& timer = timings_->timer();
  std::string reason;
  while (!sender.stop_requested() && !stop_requested()) {
    auto profiled = open_step(timer, profile_, rank_, sent_ + 1);
    data::StepPlan plan = [&] {
      auto t = timer.scope(Phase::data_wait);
      return prefetcher->next();
    }();
    if (plan.global_tokens == 0) {
      timer.discard_step();  // the stream ended after train.epochs: nothing sent, not a step
      break;
    }
    comm::PackedHiddenBatch packed;
    packed.packed = std::move(plan.micro_batches.front());
    const PackedBatch& batch = packed.packed;
    bool computed = false;
    {
      auto t = phase_scope(timer, Phase::forward, device_);
      computed = hidden_states(packed, sent_ + 1, start.token_budget, reason);
    }
    if (!computed) {
      timings_->end_step(row_of(0));
      break;
    }
    packed.cursor = encode_cursor({stream_.index, plan.position_after});
    {
      auto t = timer.scope(Phase::queue_wait);  // blocks while the drafter's queue is full
      sender.send(packed);
    }
    sample_log_.record(batch);
    ++sent_;
    tokens_ += batch.num_tokens();
    timings_->end_step(row_of(static_cast<double>(batch.num_tokens())));
  }
  sender.close(reason);
}

bool Target::hidden_states(comm::PackedHiddenBatch& packed, std::int64_t number, std::int64_t token_budget,
                           std::string& reason) {
  try {
    fault_inject_out_of_memory(rank_, number);
    packed.hidden = captured_hidden(packed.packed);
    return true;
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    log_warn(cat("out of memory in the forward of batch ", number, ": ", first_line(e.what())));
    reason = cat("target rank ", rank_, " ran out of memory in batch ", number);
    // The drafters restart every stream with half the budget, or the job ends here.
    if (!shrunk_budget(run_.step, token_budget))
      outcome_ = {3, out_of_memory_message(context_, rank_, number, token_budget,
                                           compat::peak_allocated_bytes(device_), run_.run_dir)};
    return false;
  }
}

torch::Tensor Target::captured_hidden(const PackedBatch& batch) {
  model::BackboneOutput out = target_->forward_backbone(batch, taps_);
  if (send_final_hidden_) out.taps.push_back(out.hidden);
  return torch::cat(out.taps, -1).contiguous();
}

void Target::pack_held_out_share(std::int64_t token_budget) {
  held_out_share_ = pack_held_out(held_out_, run_, token_budget, static_cast<int>(stream_.index),
                                  static_cast<int>(stream_.count), device_.is_cuda());
  held_out_budget_ = token_budget;
}

void Target::send_held_out(const StreamStart& start) {
  if (!held_out_)
    throw std::logic_error(cat("dflash_train: target rank ", rank_, " was asked for a held-out pass, but the run "
                               "holds no documents out"));
  torch::NoGradGuard frozen;
  if (held_out_budget_ != start.token_budget) pack_held_out_share(start.token_budget);
  comm::HiddenStateSender sender(MPI_COMM_WORLD, {drafter_, topology_.targets_of(drafter_)},
                                 link_config(topology_, context_.runtime.device()));
  std::string reason;
  // Not timed: this target's timings.h5 rows are its training batches (the drafters time the pass).
  for (const PackedBatch& batch : held_out_share_.batches) {
    comm::PackedHiddenBatch packed;
    packed.packed = batch.to(device_, /*non_blocking=*/true);
    if (!hidden_states(packed, sent_ + 1, start.token_budget, reason)) break;
    sender.send(packed);  // no cursor: a held-out batch moves no stream
  }
  sender.close(reason);
}

Runtime::Outcome Target::run() {
  // From the first stream on, every wait on the drafter is bounded (the first start waited
  // for the drafter's set-up, which loads models and may measure budgets).
  comm::PeerWatchdog watchdog(context_.runtime, {drafter_}, run_.step.hang_timeout_s);
  while (start_) {
    if (start_->held_out) send_held_out(*start_);
    else send_stream(*start_);
    start_ = receive_stream_start(topology_, rank_);
  }
  timings_->flush();  // every step's times known: the forward's device time on a GPU
  const double forward = timings_->phase_total(Phase::forward), blocked = timings_->phase_total(Phase::queue_wait);
  log_info_here(cat("target stream ", stream_.index, " done: ", sent_, " batches, ", tokens_, " tokens, ",
                    format_rate(tokens_ / std::max(forward, 1e-9)), " in forward; idle on a full queue ",
                    static_cast<int>(100 * blocked / std::max(forward + blocked, 1e-9)), "%"));
  return outcome_;
}

}  // namespace

Runtime::Outcome run_dflash_target(JobContext& context, model::CausalLM& target,
                                   const model::DFlashConfig& config, const torch::Device& device) {
  return Target(context, target, config, device).run();
}

}  // namespace topotrain
