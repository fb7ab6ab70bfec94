#include "topotrain/train/dflash_drafting.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "topotrain/comm/backend.h"
#include "topotrain/comm/grad_reducer.h"
#include "topotrain/comm/hidden_state_link.h"
#include "topotrain/comm/watchdog.h"
#include "topotrain/core/error.h"
#include "topotrain/core/fault_injection.h"
#include "topotrain/core/log.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/model/dflash_anchors.h"
#include "topotrain/model/dflash_drafter.h"
#include "topotrain/model/dflash_metrics.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/store/checkpoint_writer.h"
#include "topotrain/store/timing_log.h"
#include "topotrain/torch_compat.h"
#include "topotrain/train/adamw.h"
#include "topotrain/train/dflash_pipeline.h"
#include "topotrain/train/grad_clip.h"
#include "topotrain/train/lr_schedule.h"
#include "topotrain/train/out_of_memory.h"
#include "topotrain/train/progress.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/sample_log.h"
#include "topotrain/train/step_profile.h"
#include "topotrain/train/stream_cursor.h"
#include "topotrain/train/training_checkpoint.h"

namespace topotrain {
namespace {

constexpr const char* kModelName = kDFlashDrafterModel;

using Outcome = Runtime::Outcome;

// What batches held: their tokens, and the samples that start in them (a sample split
// across batches counts once, in the batch of its first token), for the drafters' end line.
struct DataAmount {
  std::int64_t samples = 0;
  std::int64_t tokens = 0;
  void add(const comm::PackedHiddenBatch& batch) {
    const at::Tensor starts = batch.packed.cu_seqlens.slice(0, 0, -1).to(at::kLong);
    samples += batch.packed.positions.index_select(0, starts).eq(0).sum().item<std::int64_t>();
    tokens += batch.tokens();
  }
  std::string str() const { return cat(samples, " samples (", tokens, " tokens)"); }
};

class Drafting {
 public:
  Drafting(JobContext& context, model::Qwen3CausalLM& target, const model::DFlashConfig& config,
           const torch::Device& device);
  Outcome run();

 private:
  bool reached_limit() const;
  // Collective over the drafters: every stream's position from the drafter that feeds on it.
  TrainingState gathered_state() const;
  void save_checkpoint();

  JobContext& context_;
  Runtime& runtime_;
  const Settings& settings_;
  const Topology& topology_;
  const model::DFlashConfig& config_;
  torch::Device device_;
  std::string run_dir_;
  TrainingLength length_;  // drafters read no data: the dataset is loaded only to measure it
  model::DFlashDrafter drafter_{nullptr};
  NamedParameters parameters_;
  std::unique_ptr<comm::Backend> backend_;
  std::unique_ptr<AdamW> optimizer_;
  TrainingState state_;
  std::vector<std::uint64_t> my_streams_;
  // Where this drafter's batches went: every batch a target sent lands in one of them.
  DataAmount trained_, skipped_, discarded_;
  std::unique_ptr<CheckpointWriter> writer_;
  std::int64_t last_checkpoint_step_ = 0;
};

Drafting::Drafting(JobContext& context, model::Qwen3CausalLM& target, const model::DFlashConfig& config,
                   const torch::Device& device)
    : context_(context),
      runtime_(context.runtime),
      settings_(context.run.settings),
      topology_(context.run.topology),
      config_(config),
      device_(device),
      run_dir_(run_directory(context.run)),
      length_(training_length(context.run.settings, *load_dataset(context.run.settings, config.target))),
      drafter_(config) {
  // The first drafter prints the drafters' news (progress, checkpoints): the run's log too.
  if (runtime_.role_rank() == 0 && runtime_.rank() != 0) log_run_to_file(context_.run);
  drafter_->load_target_tensors(*target);
  drafter_->to(device_);
  drafter_->set_compute_dtype(compute_dtype_from(settings_, device_));
  parameters_ = named_parameters_of(*drafter_);
  backend_ = comm::make_backend(runtime_.role_comm(), runtime_.device());
  for (auto& [name, p] : parameters_) backend_->broadcast(p.data(), 0);
  optimizer_ = std::make_unique<AdamW>(parameters_, adamw_config_from(settings_));
  for (int t : topology_.targets_of(runtime_.rank())) my_streams_.push_back(stream_of(topology_, t).index);

  state_ = initial_state(settings_);
  state_.streams.assign(target_count(topology_), state_.data);
  if (auto path = CheckpointReader::resolve_resume(run_dir_, context.options.resume)) {
    CheckpointState checkpoint = CheckpointReader::load(*path, expectations_for(kModelName, parameters_, *optimizer_));
    restore(checkpoint, parameters_, *optimizer_, state_);
    if (state_.streams.size() != target_count(topology_))
      throw ConfigError(cat(*path, " holds the data positions of ", state_.streams.size(), " target streams; ",
                            topology_.source, " has ", target_count(topology_),
                            " targets: resume with the number of targets the checkpoint was trained with"));
    if (runtime_.role_rank() == 0)
      log_info_here(cat("resumed from ", *path, " at step ", state_.step, ", ", state_.tokens, " tokens"));
  }
  last_checkpoint_step_ = state_.step;
  send_start_positions(topology_, runtime_.rank(), state_.streams);
  if (runtime_.role_rank() == 0) {
    writer_ = std::make_unique<CheckpointWriter>(run_dir_, settings_.integer("checkpoint.keep"));
    log_info_here(cat("drafter: ", model::count_drafter_parameters(config_), " trainable parameters, ",
                      config_.num_draft_layers, " layers, block ", config_.block_size, ", taps of target layers ",
                      config_.resolved_taps().size(), ", loss ", settings_.string("train.loss"), ", ",
                      settings_.integer("train.grad_accum"), " batch(es) per step taken ",
                      topology_.links.fan_in == FanIn::round_robin ? "round-robin" : "as they arrive", ", attention ",
                      model::to_string(drafter_->attention_options().backend), "; training ", length_.describe()));
  }
}

bool Drafting::reached_limit() const {
  return (length_.max_steps > 0 && state_.step >= length_.max_steps) ||
         (length_.stop_tokens > 0 && state_.tokens >= length_.stop_tokens);
}

TrainingState Drafting::gathered_state() const {
  TrainingState all = state_;
  all.streams = gather_stream_positions(state_.streams, my_streams_, runtime_.role_comm());
  return all;
}

void Drafting::save_checkpoint() {
  const TrainingState all = gathered_state();
  if (writer_) writer_->save(snapshot(context_.run, kModelName, parameters_, *optimizer_, all));
  last_checkpoint_step_ = state_.step;
}

Outcome Drafting::run() {
  TimingLog timings(run_dir_, runtime_.world(), runtime_.role(), pipeline_timing_config(settings_, device_));
  PhaseTimer& timer = timings.timer();
  const int me = runtime_.rank();
  comm::HiddenStateReceiver receiver(MPI_COMM_WORLD, {me, topology_.targets_of(me)},
                                     link_config(topology_, runtime_.device()));
  comm::GradReducer reducer(parameters_, *backend_, grad_reducer_config_from(settings_));
  reducer.zero_grad();
  SampleLog sample_log(settings_, run_dir_, me);  // what this drafter trained on
  StepProfile profile(settings_, run_dir_, me, device_);
  const LrSchedule schedule = lr_schedule_from(settings_, length_);
  const std::uint64_t seed = static_cast<std::uint64_t>(settings_.integer("train.seed"));
  const std::int64_t log_every = settings_.integer("log.every");
  const std::int64_t checkpoint_every = settings_.integer("checkpoint.every_steps");
  const std::int64_t tap_columns = static_cast<std::int64_t>(config_.resolved_taps().size()) * config_.target.hidden_size;
  const bool kl = config_.loss == model::DFlashLoss::kl;
  const std::size_t slots = static_cast<std::size_t>(config_.block_size);
  double lr = 0, grad_norm = 0;

  const auto grad_accum = static_cast<std::size_t>(settings_.integer("train.grad_accum"));
  const std::vector<int> targets = topology_.targets_of(me);
  const bool round_robin = topology_.links.fan_in == FanIn::round_robin;
  const bool skip_nonfinite = settings_.boolean("train.skip_nonfinite");
  std::int64_t skipped_steps = 0;
  // The drafters' line, printed by the first of them; each step reports its FLOPs (they
  // vary with the anchors drawn).
  ProgressMeter progress(progress_config_from(length_, runtime_.role_size(), device_, 0));

  comm::Watchdog watchdog(runtime_, runtime_.role_comm(), settings_.real("train.hang_timeout_s"));
  receiver.set_wait_check([&](double waited, const std::vector<int>& silent) { watchdog.check_feed(waited, silent); });
  const std::int64_t first_step = state_.step + 1;
  Outcome outcome;
  while (true) {
    timer.begin_step(state_.step + 1);
    watchdog.begin_step(state_.step + 1,
                        state_.step + 1 == first_step || comm::near_checkpoint(state_.step + 1, checkpoint_every));
    fault_inject_stall(me, state_.step + 1);
    auto profiled = profile.step(state_.step + 1);
    const auto started = PipelineClock::now();
    compat::reset_peak_allocated_bytes(device_);
    // The step's grad_accum batches: as they arrive, or from the targets in a rotation that
    // depends only on the step (so that a resumed run takes the same batches); a target
    // whose stream has ended leaves its turns to the next ones. Fewer arrive only once all
    // of this drafter's streams have ended.
    std::vector<comm::PackedHiddenBatch> inputs;
    if (!reached_limit()) {
      auto t = timer.scope(Phase::queue_wait);
      for (std::size_t m = 0; m < grad_accum; ++m) {
        const std::size_t turn = static_cast<std::size_t>(state_.step) * grad_accum + m;
        std::optional<comm::PackedHiddenBatch> next;
        for (std::size_t k = 0; k < (round_robin ? targets.size() : 1) && !next; ++k)
          next = round_robin ? receiver.next_from(targets[(turn + k) % targets.size()]) : receiver.next();
        if (!next) break;
        inputs.push_back(std::move(*next));
      }
    }
    const double waited = seconds_since(started);
    // Drafters step together (their gradients are reduced) over as many micro-batches as
    // the one with the most batches has: at the end of the data a last partial step trains
    // what there is, a drafter whose streams ended walking empty micro-batches. None goes
    // on when one was asked to stop or a target closed early: the batches then taken are
    // not trained (the checkpoint's positions leave them to a resume) and count as discarded.
    int go[3] = {-static_cast<int>(inputs.size()), receiver.early_close_reason().empty() ? 1 : 0,
                 stop_requested() ? 0 : 1};
    comm::all_reduce_in_place(go, 3, MPI_INT, MPI_MIN, runtime_.role_comm(), "MPI_Iallreduce (drafters' go)");
    const std::size_t rounds = static_cast<std::size_t>(-go[0]);
    if (rounds == 0 || !go[1] || !go[2]) {
      timer.discard_step();  // trained nothing: not a step
      for (const auto& in : inputs) discarded_.add(in);
      if (!go[2] && runtime_.role_rank() == 0) log_info_here(cat("stopping on request after step ", state_.step));
      break;
    }

    // Each micro-batch's loss sum goes backward as it is; the sums of the weights, tokens
    // and losses are reduced once, after the last micro-batch.
    // valid-slot weight, tokens, loss sum, out-of-memory ranks, FLOPs, ranks with a non-finite loss
    double sums[6] = {0, 0, 0, 0, 0, 0};
    double flops = 0;  // this drafter's
    std::vector<std::int64_t> slot_correct(slots, 0), slot_valid(slots, 0);
    std::vector<StreamCursor> cursors;
    bool out_of_memory = false, nonfinite = false;
    for (std::size_t m = 0; m < rounds; ++m) {
      reducer.begin_micro_batch(m + 1 == rounds);
      if (m >= inputs.size()) continue;  // this drafter's streams have ended
      const comm::PackedHiddenBatch& in = inputs[m];
      cursors.push_back(decode_cursor(in.cursor));
      if (std::find(my_streams_.begin(), my_streams_.end(), cursors.back().stream) == my_streams_.end())
        throw std::runtime_error(cat("dflash_train: drafter rank ", me, " received a batch of stream ",
                                     cursors.back().stream, ", which none of its targets reads"));
      sums[1] += static_cast<double>(in.tokens());
      if (out_of_memory) continue;  // still walk the schedule: the reducer must stay in step
      model::DFlashBatch batch;
      {
        auto t = timer.scope(Phase::h2d);
        batch.packed = in.packed.to(device_);
        batch.taps = in.hidden.narrow(1, 0, tap_columns);
        if (kl) batch.final_hidden = in.hidden.narrow(1, tap_columns, config_.target.hidden_size);
      }
      auto generator = at::make_generator<at::CPUGeneratorImpl>(anchor_seed(seed, cursors.back()));
      const model::DFlashBlocks blocks = model::sample_anchors(in.packed.cu_seqlens, in.packed.loss_mask,
                                                               config_.block_size, config_.max_anchors, generator);
      try {
        fault_inject_out_of_memory(me, state_.step + 1);
        model::DFlashStepOutput out;
        {
          auto t = timer.scope(Phase::forward);
          out = drafter_->forward(batch, blocks);
          if (fault_injected("TOPOTRAIN_FAULT_NONFINITE", me, state_.step + 1))
            out.loss_sum = out.loss_sum * std::numeric_limits<double>::quiet_NaN();
          compat::synchronize(device_);  // phases are CPU-timed: end each with its kernels
        }
        {
          auto t = timer.scope(Phase::backward);
          out.loss_sum.backward();
          compat::synchronize(device_);
        }
        sums[0] += out.weight_sum;
        const double loss_sum = out.loss_sum.item<double>();
        nonfinite = nonfinite || !std::isfinite(loss_sum);
        sums[2] += loss_sum;
        flops += model::dflash_step_flops(config_, blocks, in.tokens());
        const auto correct = out.slot_correct.cpu();
        for (std::size_t k = 0; k < slots; ++k) {
          slot_correct[k] += correct[static_cast<std::int64_t>(k)].item<std::int64_t>();
          slot_valid[k] += out.slot_valid[k];
        }
      } catch (const std::exception& e) {
        if (!is_out_of_memory(e)) throw;
        out_of_memory = true;
        log_warn(cat("out of memory in drafter step ", state_.step + 1, ": ", first_line(e.what())));
      }
    }
    sums[3] = out_of_memory ? 1.0 : 0.0;
    sums[4] = flops;
    sums[5] = nonfinite ? 1.0 : 0.0;
    {
      auto t = timer.scope(Phase::comm_wait);
      reducer.finish();
      comm::all_reduce_in_place(sums, 6, MPI_DOUBLE, MPI_SUM, runtime_.role_comm(), "MPI_Iallreduce (drafters' sums)");
    }
    // The first drafter rank that ran out of memory, and the first whose loss is not finite.
    int first[2] = {INT_MAX, INT_MAX};
    if (sums[3] > 0 || sums[5] > 0) {
      first[0] = out_of_memory ? me : INT_MAX;
      first[1] = nonfinite ? me : INT_MAX;
      comm::all_reduce_in_place(first, 2, MPI_INT, MPI_MIN, runtime_.role_comm(), "MPI_Iallreduce (drafters' firsts)");
    }
    if (sums[3] > 0) {
      reducer.zero_grad();
      for (const auto& in : inputs) discarded_.add(in);
      outcome = {3, out_of_memory_message(context_, first[0], state_.step + 1, settings_.integer("train.token_budget"),
                                          compat::peak_allocated_bytes(device_), run_dir_)};
      timings.end_step(row_of(0));  // the failed step: its time still shows
      break;
    }

    lr = schedule.at(length_.schedule_position(state_));
    bool finite = sums[5] == 0;
    {
      auto t = timer.scope(Phase::optimizer);
      // The summed gradient of every drafter's loss sum over the weight of all their
      // valid slots: the gradient of one drafter's mean over the union of the batches.
      const double weight = std::max(sums[0], 1e-12);
      for (auto& [name, p] : parameters_)
        if (p.grad().defined()) p.grad().div_(weight);
      grad_norm = clip_gradients(parameters_, settings_.real("train.clip"));
      // The norm of the reduced gradients is the same on every drafter, so all skip alike:
      // a non-finite step never reaches the weights or the AdamW moments.
      finite = finite && std::isfinite(grad_norm);
      if (finite) optimizer_->step(lr);
      reducer.zero_grad();
    }
    if (!finite) {
      const std::string what = cat(sums[5] > 0 ? cat("the drafter loss on rank ", first[1])
                                               : cat("the drafter gradient norm (", grad_norm, ")"),
                                   " is not finite at step ", state_.step + 1);
      if (!skip_nonfinite) {
        for (const auto& in : inputs) discarded_.add(in);
        outcome = {4, cat(what, "; no drafter applied it. The last checkpoint in ", run_dir_,
                          " holds the last good step: resume with --resume auto after lowering train.lr or checking "
                          "the data, or set train.skip_nonfinite = true to skip such steps")};
        timings.end_step(row_of(0));
        break;
      }
      ++skipped_steps;
      if (runtime_.role_rank() == 0)
        log_warn(cat(what, "; train.skip_nonfinite: step skipped (", skipped_steps, " so far)"));
    }
    state_.step += 1;
    state_.tokens += static_cast<std::int64_t>(sums[1]);
    for (std::size_t m = 0; m < inputs.size(); ++m) {
      state_.streams[cursors[m].stream] = cursors[m].after;  // a stream's batches arrive in order
      sample_log.record(inputs[m].packed);
      (finite ? trained_ : skipped_).add(inputs[m]);
    }
    StepReport report;
    report.step = state_.step;
    report.tokens = static_cast<std::int64_t>(sums[1]);
    report.loss = sums[2] / std::max(sums[0], 1e-12);
    report.loss_weight = sums[0];
    report.lr = lr;
    report.grad_norm = grad_norm;
    report.seconds = seconds_since(started);
    report.comm_seconds = timer.step_seconds(Phase::comm_wait);
    report.flops = sums[4];
    report.peak_memory = compat::peak_allocated_bytes(device_);
    report.collectives = reducer.collectives();
    report.starved_seconds = waited;
    report.slot_correct = slot_correct;
    report.slot_valid = slot_valid;

    if (checkpoint_every > 0 && state_.step % checkpoint_every == 0) {
      auto t = timer.scope(Phase::checkpoint);
      save_checkpoint();
    }
    double my_tokens = 0;
    for (const auto& in : inputs) my_tokens += static_cast<double>(in.tokens());
    StepMetrics metrics = row_of(my_tokens);
    metrics.loss = report.loss;
    metrics.lr = lr;
    metrics.grad_norm = grad_norm;
    metrics.peak_memory_bytes = static_cast<double>(report.peak_memory);
    metrics.queue_depth = static_cast<double>(receiver.queue_size());
    metrics.collectives = static_cast<double>(report.collectives);
    metrics.flops = flops;  // the drafter's FLOPs per token vary with the anchors drawn
    metrics.extra[0] = model::acceptance_length(model::slot_accuracy(slot_correct, slot_valid));
    timings.end_step(metrics);
    if (runtime_.role_rank() == 0) {
      progress.record(report, state_.tokens);
      if (state_.step % log_every == 0) log_info_here(progress.line());
    }
  }
  // The last step's line, unless it was just printed (a run ends when the next step finds
  // no batches, so the loop cannot know its last step in advance).
  if (progress.pending()) log_info_here(progress.line());

  // Whatever is still in flight was never trained on: ask the targets to end their
  // streams and discard it (the checkpoint's positions make a resume recompute it).
  receiver.request_stop();
  while (auto in = receiver.next()) discarded_.add(*in);
  // Also after an out-of-memory step: it changed nothing (no optimizer step), so the
  // state it leaves is the last good one, and a resume repeats no trained batch.
  compat::release_cached_memory(device_);
  if (checkpoint_every >= 0 && state_.step > last_checkpoint_step_) save_checkpoint();
  if (writer_) writer_->wait();
  timings.flush();
  // Every batch the targets sent, over all drafters: trained, skipped (not finite) or
  // discarded (in flight when the drafters stopped early; a resume trains it).
  std::int64_t amounts[6] = {trained_.samples, trained_.tokens, skipped_.samples,
                             skipped_.tokens,  discarded_.samples, discarded_.tokens};
  comm::all_reduce_in_place(amounts, 6, MPI_INT64_T, MPI_SUM, runtime_.role_comm(), "MPI_Iallreduce (end of data)");
  if (runtime_.role_rank() == 0)
    log_info_here(cat("drafter done: ", state_.step, " steps, ", state_.tokens, " tokens; trained ",
                      DataAmount{amounts[0], amounts[1]}.str(), ", skipped as not finite ",
                      DataAmount{amounts[2], amounts[3]}.str(), " in ", skipped_steps, " steps, discarded ",
                      DataAmount{amounts[4], amounts[5]}.str(), "; checkpoints and timings.h5 in ", run_dir_));
  return outcome;
}

}  // namespace

Runtime::Outcome run_dflash_drafting(JobContext& context, model::Qwen3CausalLM& target,
                                     const model::DFlashConfig& config, const torch::Device& device) {
  return Drafting(context, target, config, device).run();
}

}  // namespace topotrain
