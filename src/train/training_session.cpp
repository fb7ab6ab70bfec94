#include "topotrain/train/training_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/core/fault_injection.h"
#include "topotrain/core/log.h"
#include "topotrain/core/run_file.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/model/accumulate_into_grad.h"
#include "topotrain/torch_compat.h"
#include "topotrain/train/grad_clip.h"
#include "topotrain/train/launch_settings.h"
#include "topotrain/train/out_of_memory.h"
#include "topotrain/train/resume_checkpoint.h"
#include "topotrain/train/training_checkpoint.h"

namespace topotrain {
namespace {

// Work the device does; the other phases are the host waiting (for data, peers, a queue,
// the checkpoint snapshot), which only a host clock sees.
bool is_device_work(Phase phase) {
  return phase == Phase::h2d || phase == Phase::forward || phase == Phase::backward || phase == Phase::optimizer ||
         phase == Phase::eval;
}

// What a resumed launch changed of the settings its checkpoint `path` was saved with, on one
// line: a forgotten --set (another train.lr) shows there, beside the intended ones. Where
// that moves the LR (another length of the schedule: more epochs, another max_steps), a
// second line gives the LR at the resumed step under the old schedule and the new one.
void log_changed_settings(const std::string& path, const std::string& saved_toml, const JobContext& context,
                          const TrainingLength& length, const TrainingState& state) {
  Settings saved;
  try {
    merge_settings(saved_toml, path + "'s settings", saved);
  } catch (const ConfigError& e) {  // a key renamed or dropped since, say
    log_info_here(cat("settings not compared with those ", path, " was saved with: ", e.what()));
    return;
  }
  const std::string changes = context.run.settings.changes_since(saved);
  if (changes.empty()) return;
  log_info_here(cat("settings changed since ", path, ": ", changes));
  std::string lr;
  try {
    lr = schedule_change(saved, context.config, length, state);
  } catch (const ConfigError& e) {  // the saved schedule cannot be read as one
    lr = cat("the LR schedule ", path, " was trained on is not known: ", e.what());
  }
  if (!lr.empty()) log_info_here(lr);
}

// What the gradients are divided by, given the summed divisor `sum` (the agreed one; a lone
// rank's own): at least 1e-12 (an empty step's), or 1 where the job gave no divisor (its loss
// is a mean already).
double step_divisor(const StepSums& sums, double sum) {
  return sums.gradient_divisor ? std::max(sum, 1e-12) : 1.0;
}

// `phase` timed on the device's current stream (a CUDA device), else on the host.
PhaseTimer::Scope stream_scope(PhaseTimer& timer, Phase phase, const torch::Device& device) {
#ifdef TOPOTRAIN_CUDA
  if (device.is_cuda()) return timer.scope(phase, compat::current_stream(device));
#else
  (void)device;
#endif
  return timer.scope(phase);
}

// How long a stalled rank may go unnoticed (comm/watchdog.h), for the start block.
std::string hang_watchdog_text(double timeout_s) {
  if (timeout_s <= 0) return "off (train.hang_timeout_s = 0): a stalled rank holds the job up unnoticed";
  return cat("a stalled rank is named after ", format_duration(comm::step_allowance_s(timeout_s, false)), " (",
             format_duration(comm::step_allowance_s(timeout_s, true)),
             " on a process's first step and around checkpoints; train.hang_timeout_s)");
}

}  // namespace

PhaseTimer::Scope phase_scope(PhaseTimer& timer, Phase phase, const torch::Device& device) {
  return is_device_work(phase) ? stream_scope(timer, phase, device) : timer.scope(phase);
}

StepProfile::Scope open_step(PhaseTimer& timer, StepProfile& profile, int rank, std::int64_t step) {
  timer.begin_step(step);
  fault_inject_stall(rank, step);
  return profile.step(step);
}

TrainingSession::TrainingSession(JobContext& context, SessionSpec spec)
    : context_(context),
      config_(context.config),
      runtime_(context.runtime),
      device_(torch_device(context.runtime.device())),
      spec_(std::move(spec)),
      lead_(context.runtime.role_rank() == 0),
      state_(spec_.initial),
      sample_log_(context.config.cadences.log_samples, context.config.run_dir, context.runtime.rank()),
      profile_(context.config.cadences.profile, context.config.run_dir, context.runtime.rank(), device_),
      progress_(spec_.progress) {
  backend_ = comm::make_backend(runtime_.role_comm(), runtime_.device());
  backend_->time_collectives(true);  // their device time is comm_wait's on CUDA
  for (auto& [name, p] : spec_.parameters) backend_->broadcast(p.data(), 0);
  optimizer_ = std::make_unique<AdamW>(spec_.parameters, config_.adamw);
  const std::string& model_name = spec_.model_name;
  // Every rank resumes from the lead's checkpoint, or all start fresh.
  if (auto resumed = load_resume_checkpoint(runtime_, config_.run_dir, context.options.resume,
                                            expectations_for(model_name, spec_.parameters, *optimizer_))) {
    restore(resumed->state, spec_.parameters, *optimizer_, state_);
    resumed_from_ = resumed->path;
    const std::string& path = resumed_from_;
    if (lead_) {
      log_info_here(cat("resumed from ", path, " at step ", state_.step, ", ", state_.tokens, " tokens",
                        state_.streams.empty() ? cat(", sample ", state_.data.consumed_samples, " of epoch ",
                                                     state_.data.epoch)
                                               : std::string()));
      log_changed_settings(path, resumed->state.settings_toml, context, spec_.length, state_);
    }
    // A launch repeated after its run ended, or one whose length was lowered below the
    // checkpoint, would otherwise end at once with "done" as if it had trained.
    if (lead_ && done())
      log_warn(cat(path, " is at step ", state_.step, ", ", state_.tokens, " tokens, where the run's length (",
                   spec_.length.describe(), ") is reached: this launch trains nothing; raise train.max_steps, "
                   "train.max_tokens or train.epochs to train on"));
  }
  saved_step_ = state_.step;
  first_step_ = state_.step + 1;
  reducer_ = std::make_unique<comm::GradReducer>(spec_.parameters, *backend_, config_.reducer);
  reducer_->zero_grad();
  if (lead_) {
    writer_ = std::make_unique<CheckpointWriter>(config_.run_dir, config_.cadences.checkpoint_keep,
                                                 config_.cadences.checkpoint_pinned);  // makes run_dir
    if (!resumed_from_.empty()) writer_->set_aside_after(state_.step, resumed_from_);
    if (config_.cadences.tensorboard) tensorboard_ = std::make_unique<TensorBoardLog>(config_.run_dir);
    if (config_.cadences.checkpoint_every >= 0) {
      const std::int64_t bytes = writer_->reserve(checkpoint_of(state_).tensors);
      log_info_here(cat("checkpoint snapshots: ", fixed_point(static_cast<double>(bytes) / (1 << 30), 2), " GiB of ",
                        writer_->buffers_pinned() ? "pinned host memory, copied while the next step runs"
                        : device_.is_cuda()        ? "pageable host memory (checkpoint.pinned = false): each copy "
                                                     "stalls training"
                                                   : "host memory",
                        ", allocated once"));
    }
  }
  watchdog_ = std::make_unique<comm::Watchdog>(runtime_, runtime_.role_comm(), config_.step.hang_timeout_s);
}

TrainingSession::~TrainingSession() = default;

void TrainingSession::start(TimingLogConfig timing) {
  extra_fields_ = timing.extra_fields.size();
  if (tensorboard_) timing.on_record = [this](const StepRecord& record) { tensorboard_->record_timing(record); };
  timings_ = open_timing_log(config_.run_dir, runtime_, device_, std::move(timing));
  // Numbered by timings.h5, so that metrics.jsonl, settings.toml and the report agree.
  if (lead_) {
    metrics_ = std::make_unique<MetricsLog>(config_.run_dir, timings_->launch());
    settings_path_ = write_launch_settings(config_.run_dir, timings_->launch(), context_.job.name,
                                           context_.run.settings.to_toml(context_.job.name));
  }
}

int TrainingSession::launch() const { return timings_->launch(); }

StartBlock TrainingSession::start_block(std::vector<std::pair<std::string, std::string>> lines) const {
  StartBlock block;
  block.job = context_.job.name;
  block.launch = launch();
  block.run_dir = config_.run_dir;
  block.resumed_from = resumed_from_;
  block.resumed_step = first_step_ - 1;
  block.lines = std::move(lines);
  block.lines.emplace_back("watchdog", hang_watchdog_text(config_.step.hang_timeout_s));
  block.lines.emplace_back("settings", settings_path_.empty() ? std::string("(written by the lead)") : settings_path_);
  return block;
}

PhaseTimer::Scope TrainingSession::scope(Phase phase) { return phase_scope(timer(), phase, device_); }

void TrainingSession::begin_step() {
  const std::int64_t step = state_.step + 1;
  started_ = PhaseTimer::Clock::now();
  watchdog_->begin_step(step, step == first_step_ || comm::near_checkpoint(step, config_.cadences.checkpoint_every));
  profiled_.emplace(open_step(timer(), profile_, runtime_.rank(), step));
  compat::reset_peak_allocated_bytes(device_);
  oom_ = false;
  oom_peak_ = 0;
  skipped_ = false;
}

void TrainingSession::accumulate(int m, int count, bool has_data, const std::function<void()>& work) {
  reducer_->begin_micro_batch(m + 1 == count);
  if (oom_ || !has_data) return;
  try {
    fault_inject_out_of_memory(runtime_.rank(), step());
    model::AccumulateIntoGrad into_grad;
    work();
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    oom_ = true;
    oom_peak_ = compat::peak_allocated_bytes(device_);
    log_warn(cat("out of memory in micro-batch ", m, " of step ", step(), ": ", first_line(e.what())));
  }
}

torch::Tensor TrainingSession::fault_inject_nonfinite(const torch::Tensor& loss) const {
  if (!fault_injected("TOPOTRAIN_FAULT_NONFINITE", runtime_.rank(), step())) return loss;
  return loss * std::numeric_limits<double>::quiet_NaN();
}

comm::StepAgreement TrainingSession::optimizer_step(const StepSums& sums) {
  finish_reduction();
  lr_ = learning_rate(config_.lr, spec_.length, state_);
  wait_for_snapshot_copy();
  // This rank's sums in agreement order: the divisor first, then sums.values; host values
  // now, device values (each a run of elements starting at `at`) filled in by the one read.
  comm::StepAgreement mine;
  mine.sums.push_back(sums.gradient_divisor.value_or(0.0));
  std::vector<std::pair<std::size_t, std::int64_t>> read_into;
  std::vector<torch::Tensor> on_device, defined;
  torch::Tensor norm_squared, factor;
  std::optional<compat::HostCopy> read;
  {
    // The norm, the factor and the update are the optimizer's work; the read waits for the
    // step's device work up to the norm and the factor, not for an update queued after them.
    auto t = scope(Phase::optimizer);
    norm_squared = squared_gradient_norm(spec_.parameters);
    if (!norm_squared.defined()) norm_squared = torch::zeros({}, torch::dtype(torch::kFloat64).device(device_));
    for (const torch::Tensor& sum : sums.values) {
      if (!sum.defined()) {
        mine.sums.push_back(0.0);
        continue;
      }
      defined.push_back(sum);
      if (sum.is_cuda()) {
        read_into.emplace_back(mine.sums.size(), sum.numel());
        mine.sums.resize(mine.sums.size() + static_cast<std::size_t>(sum.numel()));
        on_device.push_back(sum.detach().reshape({-1}).to(torch::kFloat64));
      } else {
        const torch::Tensor host = sum.detach().reshape({-1}).to(torch::kFloat64).contiguous();
        mine.sums.insert(mine.sums.end(), host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
      }
    }
    on_device.push_back(norm_squared.reshape({1}));
    // The update before the read: alone in its group, a rank's own values decide the step,
    // and the device can decide from them what the host will (gradient_factor), so the
    // update is enqueued before the read and the device runs it while the host reads, agrees
    // and prepares the next step. With peers, an out-of-memory rank or non-finite sums
    // elsewhere are known only from the agreement: apply_or_skip enqueues the update after it.
    if (runtime_.role_size() == 1 && !oom_) {
      factor = gradient_factor(norm_squared, step_divisor(sums, mine.sums[0]), config_.step.clip, defined);
      on_device.push_back(factor.reshape({1}));
    }
    read.emplace(torch::cat(on_device));
  }
  if (factor.defined()) enqueue_update(factor);
  const torch::Tensor values = read->wait().contiguous();
  const double* next = values.data_ptr<double>();
  for (const auto& [at, count] : read_into) {
    std::copy(next, next + count, mine.sums.begin() + static_cast<std::ptrdiff_t>(at));
    next += count;
  }
  unscaled_grad_norm_ = std::sqrt(*next++);
  const bool skipped_on_device = factor.defined() && !std::isfinite(*next);
  for (double sum : mine.sums)
    if (!std::isfinite(sum)) mine.nonfinite_rank = runtime_.rank();
  if (oom_) {
    mine.oom_rank = runtime_.rank();
    mine.oom_peak = oom_peak_;
  }
  mine.stop = stop_requested();
  mine.checkpoint_writing = writer_ && writer_->writing();
  comm::StepAgreement all;
  {
    std::optional<PhaseTimer::Scope> host_wait;
    if (!device_.is_cuda()) host_wait.emplace(timer().scope(Phase::comm_wait));
    all = comm::agree_step(mine, runtime_.role_comm());
  }
  stop_agreed_ = all.stop;
  writer_busy_ = all.checkpoint_writing;
  divisor_ = step_divisor(sums, all.sums[0]);
  all.sums.erase(all.sums.begin());  // the job's sums alone, in sums.values' order
  if (!all.out_of_memory()) apply_or_skip(all, norm_squared, factor.defined(), skipped_on_device);
  return all;
}

void TrainingSession::finish_reduction() {
  // comm_wait is the host's wait for the reduction and the agreement on CPU; on CUDA the
  // host does not wait for NCCL, and comm_wait is the all-reduces' device time instead.
  std::optional<PhaseTimer::Scope> host_wait;
  if (!device_.is_cuda()) host_wait.emplace(timer().scope(Phase::comm_wait));
  reducer_->finish();
  if (device_.is_cuda()) timer().add_gpu_spans(Phase::comm_wait, reducer_->take_device_spans());
}

void TrainingSession::wait_for_snapshot_copy() {
  if (!writer_ || !writer_->snapshot_unordered()) return;
  // At grad_accum 1 the last snapshot's device-to-host copy can outlast the next step's
  // forward and backward, and the device must wait for it before the update. It waits here,
  // before the step's norm, not just before the update: the step's one read is a
  // device-to-host copy too, which queues behind the snapshot's on the copy engine, so a
  // later wait found the copy done and the optimizer phase held the stall. The wait is the
  // checkpoint's cost, timed on the stream as the checkpoint phase (the snapshot's host stall
  // is that phase's host time), so that the optimizer phase is the optimizer's work alone.
  auto t = stream_scope(timer(), Phase::checkpoint, device_);
  writer_->order_updates_after_snapshot();
}

void TrainingSession::enqueue_update(const torch::Tensor& factor) {
  // The update overwrites what the last snapshot copies: optimizer_step made the device wait.
  if (writer_ && writer_->snapshot_unordered())
    throw std::logic_error(cat("step ", step(), ": an update enqueued before the snapshot's copy was ordered"));
  auto t = scope(Phase::optimizer);
  optimizer_->step(lr_, factor);
  reducer_->zero_grad();
}

void TrainingSession::end_failed_step() {
  StepMetrics failed;
  failed.extra.assign(extra_fields_, StepMetrics::kUnset);
  timings_->end_step(failed);
  profiled_.reset();
}

std::optional<std::int64_t> TrainingSession::after_out_of_memory(const comm::StepAgreement& all,
                                                                 std::int64_t token_budget,
                                                                 const MeasuredBudget* measured) {
  reducer_->zero_grad();
  compat::release_cached_memory(device_);
  end_failed_step();
  const std::optional<std::int64_t> halved = shrunk_budget(config_.step, token_budget, measured, all.oom_peak);
  if (!halved) {
    failure_ = {3, out_of_memory_message(context_, all.oom_rank, step(), token_budget, all.oom_peak, config_.run_dir)};
    return std::nullopt;
  }
  if (lead_)
    log_warn(cat("out of memory on rank ", all.oom_rank, " at step ", step(),
                 "; ", shrink_cause(config_.step), ": retrying the step with token_budget ", *halved,
                 measured ? " (what the failing step's peak leaves room for, by the probe's measure)" : ""));
  return halved;
}

void TrainingSession::apply_or_skip(const comm::StepAgreement& all, const torch::Tensor& norm_squared, bool enqueued,
                                    bool skipped_on_device) {
  bool finite = all.nonfinite_rank < 0;
  torch::Tensor factor;  // of an update to enqueue
  {
    auto t = scope(Phase::optimizer);
    grad_norm_ = unscaled_grad_norm_ / divisor_;
    // The norm of the reduced gradients is the same on every rank, so every rank skips
    // alike: a non-finite step never reaches the weights or the AdamW moments.
    finite = finite && std::isfinite(grad_norm_);
    if (enqueued) {
      // The device decided from the values this decision read (gradient_factor's contract).
      if (finite == skipped_on_device)
        throw std::logic_error(cat("step ", step(), ": the device ", skipped_on_device ? "skipped" : "applied",
                                   " the update the host ", finite ? "applies" : "skips"));
      if (!finite) optimizer_->unstep();
    } else if (finite) {
      factor = gradient_factor(norm_squared, divisor_, config_.step.clip, {});
    } else {
      reducer_->zero_grad();
    }
  }
  if (factor.defined()) enqueue_update(factor);
  if (finite) return;
  const std::string& role = runtime_.role();
  const std::string what =
      cat(all.nonfinite_rank >= 0 ? cat("the loss on rank ", all.nonfinite_rank, " (", role, ")")
                                  : cat("the gradient norm (", grad_norm_, ")"),
          " is not finite at step ", step());
  if (!config_.step.skip_nonfinite) {
    end_failed_step();
    failure_ = {4, cat(what, "; no ", role, " applied it. The last checkpoint in ", config_.run_dir,
                       " holds the last good step: resume with --resume auto after lowering train.lr or checking "
                       "the data, or set train.skip_nonfinite = true to skip such steps")};
    return;
  }
  skipped_ = true;
  ++skipped_steps_;
  if (lead_) log_warn(cat(what, "; train.skip_nonfinite: step skipped (", skipped_steps_, " so far)"));
}

void TrainingSession::end_step(StepReport report, StepMetrics metrics) {
  report.step = state_.step;
  report.lr = lr_;
  report.grad_norm = grad_norm_;
  report.peak_memory = compat::peak_allocated_bytes(device_);
  report.collectives = reducer_->collectives();
  if (!device_.is_cuda()) report.comm_seconds = timer().step_seconds(Phase::comm_wait);
  report.seconds = std::chrono::duration<double>(PhaseTimer::Clock::now() - started_).count();
  progress_.record(report, state_.tokens);
  if (lead_) {
    const std::vector<StepValue> values = step_values(report, state_.tokens, skipped_, spec_.progress);
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    metrics_->record(report.step, now, values);
    if (tensorboard_) tensorboard_->record_step(report.step, now, values);
  }

  metrics.loss = report.loss;
  metrics.lr = lr_;
  metrics.grad_norm = grad_norm_;
  metrics.peak_memory_bytes = static_cast<double>(report.peak_memory);
  metrics.collectives = static_cast<double>(report.collectives);
  metrics.checkpoint_writing = writer_busy_ ? 1 : 0;
  // The last step (the length reached, or a stop agreed) saves here, timed with its step;
  // finish() saves what only turns out to be the last step after it.
  const bool last = done() || stop_agreed_;
  const std::int64_t every = config_.cadences.checkpoint_every;
  if (every > 0 && state_.step % every == 0 && checkpoint_due_ == 0) checkpoint_due_ = state_.step;
  if (every >= 0 && (last || (checkpoint_due_ > 0 && !writer_busy_))) {
    auto t = timer().scope(Phase::checkpoint);
    save_checkpoint();
  } else if (checkpoint_due_ == state_.step && lead_) {
    log_info_here(cat("checkpoint of step ", state_.step, " deferred: the checkpoint of step ",
                      writer_->writing_step(), " is still being written"));
  }
  timings_->end_step(std::move(metrics));
  profiled_.reset();
  if (lead_ && (state_.step % config_.cadences.log_every == 0 || last)) log_progress(progress_.line());
}

void TrainingSession::discard_step() {
  timer().discard_step();
  profiled_.reset();
}

CheckpointState TrainingSession::checkpoint_of(const TrainingState& saved) const {
  return spec_.snapshot(spec_.parameters, *optimizer_, saved);
}

void TrainingSession::save_checkpoint() {
  TrainingState saved = state_;
  if (checkpoint_streams_) saved.streams = *checkpoint_streams_;
  if (writer_) writer_->save(checkpoint_of(saved));
  saved_step_ = state_.step;
  checkpoint_due_ = 0;
}

void TrainingSession::finish() {
  // The last step's line, unless it was just printed (a pipeline's run ends when the next
  // step finds no batches, so its loop cannot know the last step in advance).
  if (lead_ && progress_.pending()) log_progress(progress_.line());
  // A failed step changed nothing (no optimizer step), so the state is the last good one
  // and a resume repeats no trained sample.
  compat::release_cached_memory(device_);
  if (config_.cadences.checkpoint_every >= 0 && state_.step > saved_step_) save_checkpoint();
  if (writer_) writer_->wait();
  timings_->flush();
}

}  // namespace topotrain
