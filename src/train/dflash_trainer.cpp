#include "topotrain/train/dflash_trainer.h"

#include <mpi.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

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

using Clock = std::chrono::steady_clock;

constexpr const char* kModelName = kDFlashDrafterModel;
constexpr int kStartPositionTag = 7301;  // drafter -> target, once, on MPI_COMM_WORLD

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

using Outcome = Runtime::Outcome;

model::DFlashConfig dflash_config_from(const Settings& settings) {
  model::DFlashConfig config;
  config.source = "settings";
  config.target = model_config_from(settings);
  config.num_draft_layers = settings.integer("model.draft_layers");
  config.block_size = settings.integer("model.block_size");
  if (settings.has("model.taps")) {
    std::stringstream list(settings.string("model.taps"));
    std::string item;
    while (std::getline(list, item, ',')) {
      try {
        config.taps.push_back(std::stoll(item));
      } catch (const std::exception&) {
        throw ConfigError(cat("model.taps = \"", settings.string("model.taps"),
                              "\": expected target layer numbers separated by commas, e.g. \"1,9,17\""));
      }
    }
  }
  const std::int64_t mask = settings.integer("model.mask_token_id");
  // The last id of the vocabulary is unused by the byte tokenizer and by Qwen's padding
  // rows, so it serves as the mask token unless one is named.
  config.mask_token_id = mask >= 0 ? mask : config.target.vocab_size - 1;
  config.gamma = settings.real("train.gamma");
  config.max_anchors = settings.integer("train.anchors");
  config.loss = model::parse_dflash_loss(settings.string("train.loss"), "train.loss");
  config.validate();
  return config;
}

comm::LinkConfig link_config(const Topology& topology, const Device& device) {
  comm::LinkConfig link;
  link.transport = topology.links.hidden_states;
  link.queue_depth = topology.links.queue_depth;
  link.device = device;
  return link;
}

std::size_t target_count(const Topology& topology) { return topology.find_role("target")->ranks.size(); }

// The k-th target rank reads stream k.
data::SampleStream stream_of(const Topology& topology, int target_rank) {
  int index = 0;
  topology.role_of(target_rank, &index);
  return {static_cast<std::uint64_t>(index), target_count(topology)};
}

// A batch's cursor: its stream, and where that stream stands after the batch.
struct StreamCursor {
  std::uint64_t stream = 0;
  data::DataPosition after;
};

at::Tensor encode_cursor(const StreamCursor& c) {
  return at::tensor({static_cast<std::int64_t>(c.stream), static_cast<std::int64_t>(c.after.seed),
                     static_cast<std::int64_t>(c.after.epoch), static_cast<std::int64_t>(c.after.consumed_samples),
                     static_cast<std::int64_t>(c.after.offset_in_sample)},
                    at::kLong);
}

StreamCursor decode_cursor(const at::Tensor& cursor) {
  if (!cursor.defined() || cursor.numel() != 5)
    throw std::runtime_error("dflash_train: a hidden-state batch arrived without its stream cursor");
  auto v = cursor.accessor<std::int64_t, 1>();
  StreamCursor c;
  c.stream = static_cast<std::uint64_t>(v[0]);
  c.after = {static_cast<std::uint64_t>(v[1]), static_cast<std::uint64_t>(v[2]), static_cast<std::uint64_t>(v[3]),
             static_cast<std::uint64_t>(v[4])};
  return c;
}

// Anchors come from a generator seeded by the batch itself (run seed, stream, position
// after it), so the same batch gets the same anchors after a resume, on any drafter.
std::uint64_t anchor_seed(std::uint64_t seed, const StreamCursor& c) {
  std::uint64_t h = seed ^ 0x9E3779B97F4A7C15ULL;
  for (std::uint64_t v : {c.stream, c.after.epoch, c.after.consumed_samples, c.after.offset_in_sample}) {
    h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ULL;
  }
  return h;
}

void send_start_position(int target, const data::DataPosition& p) {
  std::uint64_t fields[4] = {p.seed, p.epoch, p.consumed_samples, p.offset_in_sample};
  MPI_Send(fields, 4, MPI_UINT64_T, target, kStartPositionTag, MPI_COMM_WORLD);
}

data::DataPosition receive_start_position(int drafter) {
  std::uint64_t f[4];
  MPI_Recv(f, 4, MPI_UINT64_T, drafter, kStartPositionTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  return {f[0], f[1], f[2], f[3]};
}

// Both roles write the same columns: the drafter's acceptance length of each step as an
// extra field, unset on target rows.
TimingLogConfig pipeline_timing_config(const Settings& settings, const torch::Device& device) {
  TimingLogConfig config = timing_log_config_from(settings, device);
  config.extra_fields = {"tau"};
  return config;
}

StepMetrics row_of(double tokens) {
  StepMetrics metrics;
  metrics.tokens = tokens;
  metrics.extra = {StepMetrics::kUnset};
  return metrics;
}

// What batches held: their tokens, and the samples that start in them (a sample split
// across batches counts once, in the batch of its first token), for the drafters' end line.
struct DataAmount {
  std::int64_t samples = 0;
  std::int64_t tokens = 0;
  void add(const comm::PackedHiddenBatch& batch) {
    const at::Tensor starts = batch.cu_seqlens.slice(0, 0, -1).to(at::kLong);
    samples += batch.positions.index_select(0, starts).eq(0).sum().item<std::int64_t>();
    tokens += batch.tokens();
  }
  std::string str() const { return cat(samples, " samples (", tokens, " tokens)"); }
};

Outcome run_target(JobContext& context, model::Qwen3CausalLM& target, const model::DFlashConfig& config,
                   const torch::Device& device) {
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
  const data::DataPosition start = receive_start_position(drafter);
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

  Outcome outcome;
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
    const data::PackedBatch& batch = plan.micro_batches.front();
    const data::DataPosition& after = plan.position_after;
    comm::PackedHiddenBatch packed;
    try {
      fault_inject_out_of_memory(runtime.rank(), sent + 1);
      auto t = timer.scope(Phase::forward);
      const auto started = Clock::now();
      model::BackboneOutput out = target->forward_backbone(to_model_batch(batch, device), taps);
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
    packed.cu_seqlens = batch.cu_seqlens;
    packed.token_ids = batch.tokens.to(torch::kInt32);
    packed.loss_mask = batch.loss_mask;
    packed.positions = batch.positions.to(torch::kInt32);
    packed.sample_ids = batch.sample_ids;
    packed.cursor = encode_cursor({stream.index, after});
    {
      auto t = timer.scope(Phase::queue_wait);  // blocks while the drafter's queue is full
      const auto started = Clock::now();
      sender.send(packed);
      blocked_seconds += seconds_since(started);
    }
    sample_log.record(batch);
    ++sent;
    tokens += batch.num_tokens;
    timings.end_step(row_of(static_cast<double>(batch.num_tokens)));
  }
  sender.close(outcome.code != 0 ? "a target ran out of memory" : "");
  const double busy = forward_seconds + blocked_seconds;
  log_info_here(cat("target stream ", stream.index, " done: ", sent, " batches, ", tokens, " tokens, ",
                    tokens / std::max(forward_seconds, 1e-9) / 1e3, " Ktok/s in forward; idle on a full queue ",
                    static_cast<int>(100 * blocked_seconds / std::max(busy, 1e-9)), "%"));
  timings.flush();
  return outcome;
}

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
  for (int t : topology_.targets_of(runtime_.rank()))
    send_start_position(t, state_.streams[stream_of(topology_, t).index]);
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
  std::vector<std::uint64_t> flat(4 * state_.streams.size(), 0);
  for (std::uint64_t s : my_streams_) {
    const data::DataPosition& p = state_.streams[s];
    flat[4 * s] = p.seed;
    flat[4 * s + 1] = p.epoch;
    flat[4 * s + 2] = p.consumed_samples;
    flat[4 * s + 3] = p.offset_in_sample;
  }
  MPI_Allreduce(MPI_IN_PLACE, flat.data(), static_cast<int>(flat.size()), MPI_UINT64_T, MPI_SUM, runtime_.role_comm());
  TrainingState all = state_;
  for (std::size_t s = 0; s < all.streams.size(); ++s)
    all.streams[s] = {flat[4 * s], flat[4 * s + 1], flat[4 * s + 2], flat[4 * s + 3]};
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
    const auto started = Clock::now();
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
        batch.packed.tokens = in.token_ids.to(device_, torch::kInt64);
        batch.packed.positions = in.positions.to(device_, torch::kInt64);
        batch.packed.cu_seqlens = in.cu_seqlens.to(device_);
        auto lengths = in.cu_seqlens.slice(0, 1) - in.cu_seqlens.slice(0, 0, -1);
        batch.packed.max_seqlen = lengths.max().item<std::int64_t>();
        batch.loss_mask = in.loss_mask.to(device_);
        batch.taps = in.hidden.narrow(1, 0, tap_columns);
        if (kl) batch.final_hidden = in.hidden.narrow(1, tap_columns, config_.target.hidden_size);
      }
      auto generator = at::make_generator<at::CPUGeneratorImpl>(anchor_seed(seed, cursors.back()));
      const model::DFlashBlocks blocks =
          model::sample_anchors(in.cu_seqlens, in.loss_mask, config_.block_size, config_.max_anchors, generator);
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
      sample_log.record(inputs[m].sample_ids, inputs[m].cu_seqlens, inputs[m].positions);
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

void check_dflash_inputs(const RunFile& run) {
  // A target keeps at least the taps it sends (and the final hidden state for the KL loss).
  const model::DFlashConfig config = dflash_config_from(run.settings);
  check_run_inputs(run, config.target, static_cast<std::int64_t>(config.resolved_taps().size()) + 1);
}

void train_dflash(JobContext& context) {
  Runtime& runtime = context.runtime;
  const Settings& settings = context.run.settings;
  const torch::Device device = torch_device(runtime.device());
  const model::DFlashConfig config = dflash_config_from(settings);
  // Every rank builds the same target from the same seed (or loads the same weights):
  // targets run it, drafters keep its embedding, final norm and lm_head. Drawing billions
  // of random weights is CPU work, so the node's cores are shared while it runs; training
  // then uses one intra-op thread per rank.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(static_cast<int>(std::max(1u, cores / static_cast<unsigned>(runtime.local_size()))));
  torch::manual_seed(static_cast<std::uint64_t>(settings.integer("train.seed")));
  model::Qwen3CausalLM target(config.target);
  load_model_weights(runtime, settings, *target);
  at::set_num_threads(1);
  Outcome outcome = runtime.role() == "target" ? run_target(context, target, config, device)
                                               : Drafting(context, target, config, device).run();
  // Every rank ends here, whatever its role: either all go on (exit 0) or all leave with
  // the code and message of the lowest rank that failed.
  const Outcome failure = runtime.first_failure(outcome);
  if (failure.code != 0) throw JobExit(failure.code, failure.message);
}

}  // namespace topotrain
