// What every training loop of topotrain does around its model's forward and backward,
// owned by one plain object that both loops (moe_trainer.cpp, dflash_drafting.cpp) drive
// with a handful of verbs, top to bottom:
//
//   TrainingSession session(context, spec);  // open: broadcast, AdamW, resume (state())
//   session.start(timing_config);            // collective over the world: the timing log
//   while (!session.done()) {
//     session.begin_step();                  // timer, watchdog, profiler
//     ... the job takes the step's inputs, in session.scope(Phase::data_wait) ...
//     for (int m = 0; m < count; ++m)
//       session.accumulate(m, count, has_data, [&] { forward, backward });
//     StepAgreement all = session.optimizer_step(step_sums);  // agree (one collective), AdamW
//     if (all.out_of_memory()) { session.after_out_of_memory(...): shrink and retry, or end }
//     if (session.failed()) break;           // not finite: the job ends (exit 4)
//     ... the job moves its data positions ...
//     session.end_step(report, metrics);      // progress, timings row, checkpoint cadence
//   }
//   session.finish();                         // last line, final checkpoint, timings.h5
//
// Invariants, enforced here so that both jobs keep them:
// * Every rank of the group walks the step's micro-batches with the gradient reducer
//   (accumulate is called `count` times on every rank: also after this rank ran out of
//   memory, and for micro-batches without data), so that the reducer issues the same
//   collectives everywhere.
// * optimizer_step holds the step's one agreement: the job's sums, the first rank out of
//   memory, the first rank whose sums are not finite and any stop request travel in one
//   collective (comm/step_agreement.h), after the last gradient all-reduce was launched.
//   It is the one place that enqueues an AdamW update.
// * Every rank applies a step or none does: a step with an out-of-memory rank never
//   reaches the optimizer, and one whose sums or reduced gradient norm (the same on every
//   rank) are not finite is skipped (train.skip_nonfinite) or ends the job (exit 4).
// * A failed step still gets its row in timings.h5 on every rank. A job that ends on it
//   keeps what it trained: finish() saves the last good step (a failed one changed no
//   weight), and the failure (failure()) is the job's to report.
// * The session makes the host wait for the device once per step, in optimizer_step's one
//   read of the sums and the gradient norm; the rest of its work is enqueued (clipping's
//   factor is computed on the device, checkpoint snapshots copy on a side stream). The jobs
//   hand it everything they report from the device, so that nothing else waits. Where a
//   rank is alone in its group, the update is enqueued before that read, its skip decided on
//   the device from the same values, so that the device is not idle while the host reads
//   (optimizer_step's "update before the read" path).
// * Timing (phase.h): where the device is a GPU, work phases (h2d, forward, backward,
//   optimizer) are timed with CUDA events on the stream they run on and comm_wait is the
//   device time of the gradient all-reduces (the reducer's spans on the NCCL stream), all
//   read back a step later, never synchronising the device; waits (data_wait, queue_wait,
//   checkpoint) are host time. On CPU every phase is host time, comm_wait the host's wait
//   for the reduction and the agreement.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "topotrain/comm/backend.h"
#include "topotrain/comm/grad_reducer.h"
#include "topotrain/comm/step_agreement.h"
#include "topotrain/comm/watchdog.h"
#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/store/checkpoint_writer.h"
#include "topotrain/store/timing_log.h"
#include "topotrain/train/adamw.h"
#include "topotrain/train/budget_probe.h"
#include "topotrain/train/job.h"
#include "topotrain/train/metrics_log.h"
#include "topotrain/train/progress.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/sample_log.h"
#include "topotrain/train/start_block.h"
#include "topotrain/train/step_profile.h"
#include "topotrain/train/tensorboard_log.h"

namespace topotrain {

// A phase of `timer`'s open step on `device`, timed by the policy above (also for the
// pipeline's targets, which train nothing and have no session).
[[nodiscard]] PhaseTimer::Scope phase_scope(PhaseTimer& timer, Phase phase, const torch::Device& device);

// Opens step `step` of world rank `rank`: its row in `timer`, the TOPOTRAIN_FAULT_STALL hook
// (core/fault_injection.h), and its profile (log.profile_step), which ends with the returned
// scope. Every rank's step begins here: a session's, and a pipeline target's batch.
[[nodiscard]] StepProfile::Scope open_step(PhaseTimer& timer, StepProfile& profile, int rank, std::int64_t step);

struct SessionSpec {
  NamedParameters parameters;  // on the session's device, identical in shape on every rank
  // The model name of the job's checkpoints, which a resume must match (model.source, or
  // kDFlashDrafterModel).
  std::string model_name;
  // What a checkpoint of `state` holds: the job's snapshot (training_checkpoint.h), which
  // stores what rebuilds its model beside `parameters` and the optimizer. Local: no collective.
  std::function<CheckpointState(const NamedParameters& parameters, const AdamW& optimizer, const TrainingState& state)>
      snapshot;
  TrainingLength length;
  ProgressConfig progress;
  TrainingState initial;  // a fresh run's state
};

// What a step adds up over the group's ranks in its one agreement. A job keeps its own struct
// of named sums, lists them in `values` in a fixed order, and reads the agreed ones back from
// StepAgreement::sums in that order.
struct StepSums {
  // This rank's part of what the gradients are divided by (the drafters' valid-slot weight),
  // a host value; the sum over the group divides them (at least 1e-12). Unset: the loss is a
  // mean already, and the divisor is 1.
  std::optional<double> gradient_divisor;
  // Scalars or 1-D tensors, on the device or the host, each adding its elements in order to
  // StepAgreement::sums; an undefined one adds one 0.
  std::vector<torch::Tensor> values;
};

class TrainingSession {
 public:
  // Open, collective over the role's group: parameters broadcast from its rank 0 (as DDP
  // does, so that no rank trains another model), AdamW, the gradient reducer, and the
  // resumed state (--resume) of the parameters, AdamW and state().
  TrainingSession(JobContext& context, SessionSpec spec);
  ~TrainingSession();
  TrainingSession(const TrainingSession&) = delete;
  TrainingSession& operator=(const TrainingSession&) = delete;

  // Collective over the world (timings.h5 is one file of every rank's rows): call it on
  // every rank of the job, at the same point of its protocol as the other roles do. The
  // lead then opens metrics.jsonl and writes settings.toml, both numbered by timings.h5's
  // launch.
  void start(TimingLogConfig timing);

  // After start(): this launch's number (timings.h5's) and the start block the lead prints,
  // its common lines and `lines` (the job's: model, data, budget, length), then where the
  // lead wrote settings.toml.
  int launch() const;
  StartBlock start_block(std::vector<std::pair<std::string, std::string>> lines) const;

  TrainingState& state() { return state_; }
  // The stream positions the checkpoints of state() store from now on, where they are not
  // state().streams: a pipeline's drafters each know only their own streams, and hand the
  // gathered positions of all of them (a collective they make at their call site) every step.
  void set_checkpoint_streams(std::vector<data::DataPosition> streams) { checkpoint_streams_ = std::move(streams); }
  // The checkpoint resumed from; empty for a fresh run.
  const std::string& resumed_from() const { return resumed_from_; }
  const TrainingLength& length() const { return spec_.length; }
  // The length is reached (max_steps, max_tokens, or the epochs of the data position).
  bool done() const { return spec_.length.done(state_); }
  // The lead (the group's rank 0) prints progress and writes checkpoints.
  bool lead() const { return lead_; }
  std::int64_t step() const { return state_.step + 1; }  // the step being trained
  int rank() const { return runtime_.rank(); }
  comm::Watchdog& watchdog() { return *watchdog_; }
  PhaseTimer& timer() { return timings_->timer(); }
  const comm::GradReducer& reducer() const { return *reducer_; }
  SampleLog& sample_log() { return sample_log_; }

  // A phase of the open step, timed by the policy above.
  [[nodiscard]] PhaseTimer::Scope scope(Phase phase);

  // A held-out evaluation after the step just trained: `evaluate()` runs timed as the step's
  // eval phase, and the lead logs "held-out {what} after step N{describe(result)}, in S s".
  template <typename Evaluate, typename Describe>
  auto evaluate_held_out(const std::string& what, Evaluate&& evaluate, Describe&& describe) {
    const auto started = std::chrono::steady_clock::now();
    auto result = [&] {
      auto t = scope(Phase::eval);
      return evaluate();
    }();
    if (lead_)
      log_info_here(cat("held-out ", what, " after step ", state_.step, describe(result), ", in ",
                        fixed_point(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 2),
                        " s"));
    return result;
  }

  void begin_step();
  // Micro-batch m of `count`: runs `work` (forward and backward) unless this rank already
  // ran out of memory in this step or `has_data` is false (the data ended within the step),
  // walking the reducer either way. An out-of-memory error is caught and kept for
  // optimizer_step's agreement.
  // `work` runs in a model::AccumulateIntoGrad scope: the reducer keeps every trained
  // parameter's .grad() bound to its bucket, so master weights' gradients go straight there.
  void accumulate(int m, int count, bool has_data, const std::function<void()>& work);
  bool out_of_memory() const { return oom_; }
  // `loss`, or NaN times it at the step TOPOTRAIN_FAULT_NONFINITE names for this rank
  // (core/fault_injection.h): the jobs' one hook for a non-finite loss.
  torch::Tensor fault_inject_nonfinite(const torch::Tensor& loss) const;
  // After an agreement with an out-of-memory rank: the gradients are dropped and the cache
  // released, and the step's row is written. With train.oom = "shrink" and a budget above
  // 1, returns half of `token_budget` (logged by the lead), or with an automatic budget
  // (`measured`) what the failing step's peak says fits (shrunk_budget): the job retries the
  // step from its data position with it. Otherwise the job ends (failure(): exit 3 with the
  // resume command) and nullopt comes back.
  std::optional<std::int64_t> after_out_of_memory(const comm::StepAgreement& all, std::int64_t token_budget,
                                                  const MeasuredBudget* measured = nullptr);
  // The step's end on the device and its one agreement: finishes the gradient reduction,
  // enqueues the reduced gradients' norm, reads this rank's `sums` and that norm in one
  // device-to-host copy (the step's only wait for the device), agrees (StepAgreement::sums
  // holds sums.values' elements, summed), and then, unless a rank ran out of memory
  // (after_out_of_memory is the job's next call), applies AdamW at the schedule's LR to the
  // reduced gradients divided by the agreed divisor and clipped (train.clip) by their norm,
  // both as AdamW's gradient factor. A step that is not finite is skipped on every rank
  // (train.skip_nonfinite: skipped() tells) or ends the job (failed(), failure(): exit 4).
  comm::StepAgreement optimizer_step(const StepSums& sums);
  bool failed() const { return failure_.code != 0; }
  bool skipped() const { return skipped_; }  // the last optimizer_step skipped its step
  std::int64_t skipped_steps() const { return skipped_steps_; }
  double lr() const { return lr_; }
  double grad_norm() const { return grad_norm_; }

  // After the job moved state() past the step: its progress (the lead prints every
  // log.every steps and after the last, and writes a line of metrics.jsonl, and with
  // log.tensorboard an event, every step),
  // its timings row, and its checkpoint at the
  // checkpoint.every_steps cadence and after the last step (the length reached or a stop
  // agreed). A checkpoint that falls due while the previous one is still being written is
  // deferred to the first step after that write (logged; the last step's always waits).
  // `report` and `metrics` are completed with what the session knows (lr, norm,
  // memory, collectives, comm and wall time).
  void end_step(StepReport report, StepMetrics metrics);
  // The step's inputs turned out to be nothing to train: not a step.
  void discard_step();

  // The last step's line if not yet printed, the final checkpoint (unless
  // checkpoint.every_steps = -1 or it is saved already), every checkpoint written, and
  // timings.h5 complete (collective over the world). Call it once, also after a failure.
  void finish();
  // Exit code and message of the step that ended the job; code 0 when none did.
  const Runtime::Outcome& failure() const { return failure_; }

 private:
  void save_checkpoint();
  // The checkpoint of `saved` (what snapshot() makes of the spec's model): also what the
  // writer's buffers are shaped after.
  CheckpointState checkpoint_of(const TrainingState& saved) const;
  void end_failed_step();
  // Makes the device wait for the last snapshot's copy (if not yet ordered), timed as the
  // checkpoint phase on the stream; optimizer_step calls it before any of the step's
  // optimizer work.
  void wait_for_snapshot_copy();
  // Waits for the gradient all-reduces to finish, timed as comm_wait.
  void finish_reduction();
  // Applies, skips or ends on the agreed step (optimizer_step's second half). `enqueued`: the
  // update went out before the read, and the device skipped it if `skipped_on_device`.
  void apply_or_skip(const comm::StepAgreement& all, const torch::Tensor& norm_squared, bool enqueued,
                     bool skipped_on_device);
  // AdamW with `factor` (gradient_factor); the gradients zeroed. Opens the optimizer scope:
  // call it with none open, after wait_for_snapshot_copy().
  void enqueue_update(const torch::Tensor& factor);

  JobContext& context_;
  const RunConfig& config_;
  Runtime& runtime_;
  torch::Device device_;
  SessionSpec spec_;
  bool lead_ = false;
  std::unique_ptr<comm::Backend> backend_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<comm::GradReducer> reducer_;
  TrainingState state_;
  std::optional<std::vector<data::DataPosition>> checkpoint_streams_;
  std::unique_ptr<CheckpointWriter> writer_;
  std::int64_t saved_step_ = 0;
  std::string resumed_from_;
  std::string settings_path_;  // the lead's settings.toml, written by start()
  SampleLog sample_log_;
  StepProfile profile_;
  ProgressMeter progress_;
  std::unique_ptr<MetricsLog> metrics_;  // the lead's
  // The lead's with log.tensorboard; declared before timings_, whose last records (written
  // as it is destroyed) it receives.
  std::unique_ptr<TensorBoardLog> tensorboard_;
  std::unique_ptr<comm::Watchdog> watchdog_;
  std::unique_ptr<TimingLog> timings_;
  std::size_t extra_fields_ = 0;  // TimingLogConfig::extra_fields of the timing log
  std::int64_t first_step_ = 0;
  std::optional<StepProfile::Scope> profiled_;
  PhaseTimer::Clock::time_point started_;
  bool stop_agreed_ = false;  // the last agreement's stop
  bool writer_busy_ = false;  // the last agreement's checkpoint_writing
  std::int64_t checkpoint_due_ = 0;  // the step of a deferred checkpoint; 0: none
  double unscaled_grad_norm_ = 0;  // read by optimizer_step, before the divisor
  double divisor_ = 1;             // the agreed gradient divisor of the step
  bool oom_ = false;
  std::int64_t oom_peak_ = 0;
  bool skipped_ = false;
  std::int64_t skipped_steps_ = 0;
  double lr_ = 0, grad_norm_ = 0;
  Runtime::Outcome failure_;
};

}  // namespace topotrain
