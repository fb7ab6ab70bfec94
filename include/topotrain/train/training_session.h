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
//     StepAgreement all = session.agree(read_sums, divisor_sum);  // gradients reduced; one collective
//     if (all.out_of_memory()) { session.after_out_of_memory(...): shrink and retry, or end }
//     if (!session.optimizer_step(all)) break;  // clip, AdamW, or skip / end
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
// * agree is the step's one agreement: the job's sums, the first rank out of memory, the
//   first rank whose sums are not finite and any stop request travel in one collective
//   (comm/step_agreement.h), after the last gradient all-reduce was launched.
// * Every rank applies a step or none does: a step with an out-of-memory rank never
//   reaches the optimizer, and one whose sums or reduced gradient norm (the same on every
//   rank) are not finite is skipped (train.skip_nonfinite) or ends the job (exit 4).
// * A failed step still gets its row in timings.h5 on every rank. A job that ends on it
//   keeps what it trained: finish() saves the last good step (a failed one changed no
//   weight), and the failure (failure()) is the job's to report.
// * The session makes the host wait for the device once per step, in agree's one read of
//   the sums and the gradient norm; the rest of its work is enqueued (clipping's factor is
//   computed on the device, checkpoint snapshots copy on a side stream). The jobs hand
//   agree everything they report from the device, so that nothing else waits. Where a rank
//   is alone in its group, the update is enqueued before that read, its skip decided on the
//   device from the same values, so that the device is not idle while the host reads.
// * Timing (phase.h): where the device is a GPU, work phases (h2d, forward, backward,
//   optimizer) are timed with CUDA events on the stream they run on and comm_wait is the
//   device time of the gradient all-reduces (the reducer's spans on the NCCL stream), all
//   read back a step later, never synchronising the device; waits (data_wait, queue_wait,
//   checkpoint) are host time. On CPU every phase is host time, comm_wait the host's wait
//   for the reduction and the agreement.
#pragma once

#include <torch/torch.h>

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
#include "topotrain/model/dflash_drafter.h"
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

struct SessionSpec {
  NamedParameters parameters;  // on the session's device, identical in shape on every rank
  // What checkpoints are of: a Qwen3 model (its config is stored) or, when `model` is null,
  // a DFlash drafter (its settings, its target's config and its final norm are stored).
  const model::ModelConfig* model = nullptr;
  const model::DFlashDrafterImpl* drafter = nullptr;
  TrainingLength length;
  ProgressConfig progress;
  TrainingState initial;  // a fresh run's state
  // What a checkpoint stores; state() when unset. A pipeline's drafters gather every
  // stream's position here (a collective: every rank of the group saves alike).
  std::function<TrainingState(const TrainingState&)> checkpoint_state;
  // How failure messages name the model and the group's ranks: "the {subject}loss on rank
  // R ...; no {member} applied it".
  std::string subject;          // "" or "drafter "
  std::string member = "rank";  // "rank" or "drafter"
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

  void begin_step();
  // Micro-batch m of `count`: runs `work` (forward and backward) unless this rank already
  // ran out of memory in this step or `has_data` is false (the data ended within the step),
  // walking the reducer either way. An out-of-memory error is caught and kept for agree().
  // `work` runs in a model::AccumulateIntoGrad scope: the reducer keeps every trained
  // parameter's .grad() bound to its bucket, so master weights' gradients go straight there.
  void accumulate(int m, int count, bool has_data, const std::function<void()>& work);
  bool out_of_memory() const { return oom_; }
  // Finishes the gradient reduction, enqueues the reduced gradients' norm, then reads this
  // rank's `sums` (scalars or 1-D tensors, on the device or the host, each adding its
  // elements in order to StepAgreement::sums; an undefined one adds one 0) and that norm in
  // one device-to-host copy (the step's only wait for the device) and agrees. The gradients
  // are divided by the agreed sum number `divisor_sum` (at least 1e-12; a host value on this
  // rank), or by 1 without one (the loss was a mean already). A rank alone in its group
  // enqueues the update before the read (see the invariants above).
  comm::StepAgreement agree(const std::vector<torch::Tensor>& sums,
                            std::optional<std::size_t> divisor_sum = std::nullopt);

  // After an agreement with an out-of-memory rank: the gradients are dropped and the cache
  // released, and the step's row is written. With train.oom = "shrink" and a budget above
  // 1, returns half of `token_budget` (logged by the lead), or with an automatic budget
  // (`measured`) what the failing step's peak says fits (shrunk_budget): the job retries the
  // step from its data position with it. Otherwise the job ends (failure(): exit 3 with the
  // resume command) and nullopt comes back.
  std::optional<std::int64_t> after_out_of_memory(const comm::StepAgreement& all, std::int64_t token_budget,
                                                  const MeasuredBudget* measured = nullptr);
  // Applies AdamW at the schedule's LR to the reduced gradients divided by agree()'s divisor
  // and clipped (train.clip) by their norm, both as AdamW's gradient factor, unless the step
  // is not finite (where agree() enqueued the update, the device skipped it alike and the
  // step count is taken back). False when the job ends on it (failure(): exit 4); a skipped
  // step returns true, with skipped() telling.
  bool optimizer_step(const comm::StepAgreement& all);
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
  // checkpoint phase on the stream; agree() calls it before any of the step's optimizer work.
  void wait_for_snapshot_copy();
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
  double unscaled_grad_norm_ = 0;  // read by agree(), before optimizer_step's divisor
  torch::Tensor norm_squared_;     // the step's squared gradient norm, on the device
  std::optional<std::size_t> divisor_sum_;
  bool update_enqueued_ = false;    // agree() enqueued the step's update
  bool skipped_on_device_ = false;  // ... and its factor, read back, was not finite
  bool oom_ = false;
  std::int64_t oom_peak_ = 0;
  bool skipped_ = false;
  std::int64_t skipped_steps_ = 0;
  double lr_ = 0, grad_norm_ = 0;
  Runtime::Outcome failure_;
};

}  // namespace topotrain
