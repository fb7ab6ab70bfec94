#include "topotrain/train/dflash_drafting.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <map>
#include <optional>

#include "topotrain/comm/hidden_state_link.h"
#include "topotrain/comm/watchdog.h"
#include "topotrain/core/error.h"
#include "topotrain/core/fault_injection.h"
#include "topotrain/core/log.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/infer/speculation_run.h"
#include "topotrain/model/dflash_anchors.h"
#include "topotrain/model/dflash_drafter.h"
#include "topotrain/model/dflash_metrics.h"
#include "topotrain/train/dflash_held_out.h"
#include "topotrain/train/dflash_pipeline.h"
#include "topotrain/train/held_out_eval.h"
#include "topotrain/train/out_of_memory.h"
#include "topotrain/train/run_setup.h"
#include "topotrain/train/stream_cursor.h"
#include "topotrain/train/trained_models.h"
#include "topotrain/train/training_checkpoint.h"
#include "topotrain/train/training_session.h"

namespace topotrain {
namespace {

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
  DataAmount& operator+=(const DataAmount& other) {
    samples += other.samples;
    tokens += other.tokens;
    return *this;
  }
};

// Where this drafter's batches went: every batch a target sent lands in one of them.
// Discarded batches are left to a resume, unless the streams restart (train.oom =
// "shrink"), which sends them again: then they were recomputed.
struct BatchFates {
  DataAmount trained, skipped, discarded, recomputed;
  void restart() {
    recomputed += discarded;
    discarded = {};
  }
  void discard(const std::vector<comm::PackedHiddenBatch>& batches) {
    for (const auto& batch : batches) discarded.add(batch);
  }
};

// A step's sums on this drafter, as the agreement adds them: valid-slot weight, tokens,
// loss sum, model FLOPs (which vary with the anchors drawn), this drafter's streams whose
// data has ended after the step (counted with held-out documents only: their sum tells the
// run's last step), then per block slot the correct drafts, the valid slots and the two
// trivial drafters' correct drafts (model::TrivialDrafterCounts). Draft
// quality is thus every drafter's, read with the loss in the agreement's one wait for the
// device.
struct DraftSums {
  explicit DraftSums(const model::DFlashConfig& config)
      : slot_valid(static_cast<std::size_t>(config.block_size), 0),
        trivial(config.block_size, config.target.vocab_size) {}

  double weight = 0, tokens = 0, flops = 0, ended_streams = 0;
  torch::Tensor loss, slot_correct;  // on the device
  std::vector<std::int64_t> slot_valid;
  // Each drafter's own trivial drafters: summed over drafters, each counts with hindsight on
  // its own slots, at least what one pair chosen over all drafters' slots would score.
  model::TrivialDrafterCounts trivial;

  std::vector<torch::Tensor> agreed() const {
    const std::int64_t slots = static_cast<std::int64_t>(slot_valid.size());
    auto host = [](double v) { return torch::tensor(v, torch::kFloat64); };
    return {host(weight), host(tokens), loss, host(flops), host(ended_streams),
            slot_correct.defined() ? slot_correct : torch::zeros({slots}, torch::kInt64),
            torch::tensor(slot_valid, torch::kInt64), trivial.correct()};
  }
};
constexpr std::size_t kEndedStreamsSum = 4;
// train.eval_speculate's responses: long enough for several blocks of 16, short enough that a
// held-out pass of a few prompts stays a pause.
constexpr std::int64_t kEvalSpeculateTokens = 128;
constexpr std::size_t kFirstSlotSum = 5;

model::DFlashBatch drafter_batch(const comm::PackedHiddenBatch& in, const model::DFlashConfig& config,
                                 const torch::Device& device) {
  const std::int64_t tap_columns = static_cast<std::int64_t>(config.resolved_taps().size()) * config.target.hidden_size;
  model::DFlashBatch batch;
  batch.packed = in.packed.to(device);
  batch.taps = in.hidden.narrow(1, 0, tap_columns);
  if (config.loss == model::DFlashLoss::kl) batch.final_hidden = in.hidden.narrow(1, tap_columns, config.target.hidden_size);
  return batch;
}

// The drafters' step as the progress line shows it: the agreed sums (draft quality
// included), this drafter's wait for batches.
StepReport step_report(const comm::StepAgreement& all, const DraftSums& sums, double waited) {
  StepReport report;
  report.tokens = static_cast<std::int64_t>(all.sums[1]);
  report.loss = all.sums[2] / std::max(all.sums[0], 1e-12);
  report.loss_weight = all.sums[0];
  report.flops = all.sums[3];
  report.starved_seconds = waited;
  const std::size_t slots = sums.slot_valid.size();
  auto slot_sums = [&](std::size_t run) {  // the run-th [B] run of sums after kFirstSlotSum
    std::vector<std::int64_t> counts;
    for (std::size_t k = 0; k < slots; ++k)
      counts.push_back(static_cast<std::int64_t>(all.sums[kFirstSlotSum + run * slots + k]));
    return counts;
  };
  report.draft = DraftQuality{slot_sums(0), slot_sums(1), slot_sums(2), slot_sums(3)};
  return report;
}

class Drafting {
 public:
  Drafting(JobContext& context, model::Qwen3CausalLM& target, const model::DFlashConfig& dflash,
           const torch::Device& device);
  Outcome run();

 private:
  // Trains from one start of the streams until they end, the drafters stop or a step fails.
  // With train.oom = "shrink", after an out-of-memory here or on a target: the budget every
  // stream restarts with (half the current one).
  std::optional<std::int64_t> train_streams();
  void open_link();
  // train.token_budget = "auto": this drafter's forward and backward of the worst cases.
  BudgetStage budget_stage();
  // The step's batches: as they arrive, or from the targets in a rotation that depends only
  // on the step (so that a resumed run takes the same batches); a target whose stream has
  // ended leaves its turns to the next ones. Fewer arrive only once all of this drafter's
  // streams have ended.
  std::vector<comm::PackedHiddenBatch> take_inputs();
  // Drafters step together (their gradients are reduced) over as many micro-batches as the
  // one with the most batches has: at the end of the data a last partial step trains what
  // there is, a drafter whose streams ended walking empty micro-batches. None goes on
  // (rounds 0) when one was asked to stop or a target closed early.
  struct Rounds {
    std::size_t rounds = 0;
    bool early_close = false;  // a target of some drafter closed its stream early
  };
  Rounds agree_on_rounds(std::size_t mine);
  void train_micro_batch(const comm::PackedHiddenBatch& in, const StreamCursor& cursor, DraftSums& sums);
  // The next batch of `target` (any target when negative): one paused by a held-out pass
  // first, in the order it arrived.
  std::optional<comm::PackedHiddenBatch> next_input(int target);
  // The reason of a target that closed its stream early, on this link or one a held-out
  // pass replaced; empty when none did.
  std::string early_close_reason() const;
  // With held-out documents: how many of this drafter's streams have no data left once the
  // step that took batches at `cursors` completes.
  double ended_streams(const std::vector<StreamCursor>& cursors) const;
  // After the step just trained, collective over the drafters: pauses this drafter's
  // streams (what is in flight is kept, not discarded), has its targets send their share
  // of the held-out documents, runs the drafter over it without gradients, and starts the
  // streams again after the last batch received. Timed as the step's eval phase; the lead
  // logs the result.
  HeldOutDraftQuality evaluate_held_out();
  // train.eval_speculate, on the first drafter after a held-out pass: greedy DFlash speculative
  // decoding of the first prompts of the held-out documents (infer/speculation_run.h), with the
  // target moved to this drafter's device at the first call (its fp32 weights stay there).
  // The other drafters wait for it at the next step's agreement. nullopt: no prompt there.
  std::optional<infer::SpeculationReport> speculate_held_out();

  JobContext& context_;
  const RunConfig& config_;
  const Topology& topology_;
  const model::DFlashConfig& dflash_;
  torch::Device device_;
  int me_;
  model::DFlashDrafter drafter_{nullptr};
  std::vector<std::uint64_t> my_streams_;
  std::unique_ptr<TrainingSession> session_;
  std::unique_ptr<comm::HiddenStateReceiver> receiver_;
  // What the targets pack with: train.token_budget or the automatic one, lowered by each shrink.
  std::int64_t token_budget_;
  std::optional<MeasuredBudget> measured_;  // train.token_budget = "auto"
  BatchFates fates_;
  // Held-out evaluation (data.eval_path or data.eval_fraction): the drafters then read the
  // datasets too, for the training split's length and the held-out set's size.
  bool held_out_ = false;
  std::uint64_t train_samples_ = 0, held_out_documents_ = 0;
  std::shared_ptr<const data::TokenDataset> held_out_set_;  // with train.eval_speculate
  model::Qwen3CausalLM target_;  // the whole target, for train.eval_speculate
  std::deque<comm::PackedHiddenBatch> paused_;  // received before a held-out pass, not yet taken
  std::string early_close_;                     // seen by a link a held-out pass replaced
};

Drafting::Drafting(JobContext& context, model::Qwen3CausalLM& target, const model::DFlashConfig& dflash,
                   const torch::Device& device)
    : context_(context),
      config_(context.config),
      topology_(context.run.topology),
      dflash_(dflash),
      device_(device),
      me_(context.runtime.rank()),
      drafter_(dflash),
      token_budget_(context.config.step.token_budget),
      target_(target) {
  Runtime& runtime = context.runtime;
  // The first drafter prints the drafters' news (progress, checkpoints): the run's log too.
  if (runtime.role_rank() == 0 && me_ != 0) log_run_to_file(config_.run_dir);
  drafter_->load_target_tensors(*target);
  // Fine-tuning: every drafter starts from the same weights (the session's broadcast would
  // make them so anyway); a resume then overwrites them with its checkpoint's.
  try {
    if (!config_.draft_weights.empty()) load_drafter_weights(config_.draft_weights, *drafter_);
  } catch (const ConfigError& e) {
    throw ConfigError(cat("model.draft_weights: ", e.what()));
  }
  drafter_->to(device_);
  drafter_->set_compute_dtype(compute_dtype(config_.dtype, device_));
  for (int t : topology_.targets_of(me_)) my_streams_.push_back(stream_of(topology_, t).index);

  // Drafters read no data but with held-out documents (the training split's length and
  // its end, the held-out set's size): else the dataset's header says how long the run is.
  // An automatic budget reads them too: the samples' lengths shape the probe's batches.
  held_out_ = config_.data.has_eval();
  std::int64_t train_tokens = 0;
  TrainingData data;  // held until the resumed state is checked against it
  if (held_out_ || config_.step.auto_budget) {
    data = load_training_data(config_);
    train_tokens = static_cast<std::int64_t>(data.train->num_tokens());
    train_samples_ = data.train->num_samples();
  } else {
    train_tokens = static_cast<std::int64_t>(data::TokenDataset::read_header(config_.data.path).num_tokens);
  }
  if (config_.step.auto_budget) {
    measured_ = measure_stream_budget(context, budget_stage(), budget_bounds(*data.train), device_);
    token_budget_ = measured_->budget;
  }
  if (held_out_) {
    held_out_documents_ = data.held_out->num_samples();
    if (config_.cadences.eval_speculate > 0) {
      // Refused now rather than at the first evaluation, steps into the run.
      if (!data.held_out->has_loss_mask())
        throw ConfigError(cat("train.eval_speculate = ", config_.cadences.eval_speculate, ": the held-out documents (",
                              config_.data.eval_path.empty() ? "data.eval_fraction of " + config_.data.path
                                                             : config_.data.eval_path,
                              ") have no loss mask, so no assistant turn to cut a prompt before; hold out chat "
                              "data prepared from \"messages\" (topotrain-prepare), or set train.eval_speculate = 0"));
      held_out_set_ = data.held_out;
    }
    // The targets' check of the set, made here too, so that every rank refuses it before
    // one waits on another.
    pack_held_out(data.held_out, config_, token_budget_, 0, static_cast<int>(target_count(topology_)), false);
  }
  SessionSpec spec;
  spec.parameters = named_parameters_of(*drafter_);
  spec.drafter = drafter_.get();
  spec.length = training_length(config_.length, train_tokens);
  // The drafters' line, printed by the first of them; each step reports its FLOPs.
  spec.progress = progress_config_from(spec.length, runtime.role_size(), device_, 0);
  spec.initial = initial_state(config_.step.seed);
  spec.initial.streams.assign(target_count(topology_), spec.initial.data);
  spec.checkpoint_state = [this](const TrainingState& state) {
    TrainingState all = state;
    all.streams = gather_stream_positions(state.streams, my_streams_, context_.runtime.role_comm());
    return all;
  };
  spec.subject = "drafter ";
  spec.member = "drafter";
  session_ = std::make_unique<TrainingSession>(context, std::move(spec));
  // The training set, as moe_train checks it: a resume on another set is refused. Without the
  // dataset loaded the header's token count is what this rank knows of it.
  TrainingSetIdentity training_set;
  if (data.train) {
    training_set = training_set_identity(*data.train, config_.data.path);
  } else {
    training_set.tokens = train_tokens;
    training_set.path = config_.data.path;
    training_set.tokenizer_files = stored_tokenizer_files(config_.data.path);
  }
  adopt_training_set(session_->state(), training_set, config_);
  data = {};
  const std::size_t streams = session_->state().streams.size();
  if (streams != target_count(topology_))
    throw ConfigError(cat(session_->resumed_from(), " holds the data positions of ", streams, " target streams; ",
                          topology_.source, " has ", target_count(topology_),
                          " targets: resume with the number of targets the checkpoint was trained with"));
  if (measured_) session_->state().measured_budget = {measured_->budget, measured_->bytes_per_token()};
  send_stream_starts(topology_, me_, session_->state().streams, token_budget_);
  if (session_->lead())
    log_info_here(cat("drafter: ", model::count_drafter_parameters(dflash_), " trainable parameters, ",
                      dflash_.num_draft_layers, " layers, block ", dflash_.block_size, ", taps of target layers ",
                      model::taps_text(dflash_.resolved_taps()), ", loss ", model::to_string(dflash_.loss), ", ",
                      config_.step.grad_accum, " batch(es) per step taken ",
                      topology_.links.fan_in == FanIn::round_robin ? "round-robin" : "as they arrive", ", attention ",
                      model::to_string(drafter_->attention_options().backend), "; training ",
                      session_->length().describe(),
                      config_.draft_weights.empty() || !session_->resumed_from().empty()
                          ? std::string()
                          : cat("; starting from the drafter ", config_.draft_weights)));
  session_->start(pipeline_timing_config(config_, device_));
  if (session_->lead())
    log_start_block(session_->start_block(
        {{"target", model_text(config_.model)},
         {"drafter", cat(count_text(static_cast<double>(model::count_drafter_parameters(dflash_))), " parameters, ",
                         dflash_.num_draft_layers, " layer(s), block ", dflash_.block_size)},
         {"data", cat(config_.data.path, ": ", train_samples_ > 0 ? cat(train_samples_, " documents, ") : "",
                      train_tokens, " tokens", held_out_ ? cat("; ", held_out_documents_, " held-out documents") : "")},
         {"budget", cat(target_count(topology_), " target stream(s) of ", token_budget_, "-token batches -> ",
                        context.runtime.role_size(), " drafter(s) x ", config_.step.grad_accum, " batch(es) per step")},
         {"length", session_->length().describe()}}));
  open_link();
}

BudgetStage Drafting::budget_stage() {
  BudgetStage stage;
  stage.name = "drafter";
  stage.vocab_size = dflash_.target.vocab_size;
  // The longest contexts, and the most anchors per token (a document of L tokens has
  // min(train.anchors, L - 1) of them, each a block of block_size drafted tokens).
  const auto anchors = static_cast<double>(dflash_.max_anchors);
  stage.worst_first = {longest_first, [anchors](std::int64_t length) {
                         return std::min(anchors, static_cast<double>(length - 1)) / static_cast<double>(length);
                       }};
  stage.run = [this](const PackedBatch& batch, std::mt19937_64& draws) {
    // The hidden states' values do not matter: their memory does.
    const auto like = torch::TensorOptions().dtype(compute_dtype(config_.dtype, device_)).device(device_);
    const std::int64_t tokens = batch.num_tokens(), hidden = dflash_.target.hidden_size;
    model::DFlashBatch in;
    in.packed = batch;
    in.taps = torch::full({tokens, static_cast<std::int64_t>(dflash_.resolved_taps().size()) * hidden}, 0.5, like);
    if (dflash_.loss == model::DFlashLoss::kl) in.final_hidden = torch::full({tokens, hidden}, 0.5, like);
    auto generator = at::make_generator<at::CPUGeneratorImpl>(draws());
    const model::DFlashBlocks blocks =
        model::sample_anchors(batch.cu_seqlens, batch.loss_mask, dflash_.block_size, dflash_.max_anchors, generator);
    drafter_->forward(in, blocks).loss_sum.backward();
  };
  stage.trained = drafter_->parameters();
  // Beside the batch it trains on: the link's queue, the step's other batches, and during a
  // held-out pass the paused batches while the pass's own link fills its queue.
  const comm::LinkPayloads link = comm::link_payloads(link_config(topology_, context_.runtime.device()),
                                                      topology_.targets_of(me_).size(), device_.is_cuda());
  const double payloads = link.receiver * (held_out_ ? 2 : 1) + static_cast<double>(config_.step.grad_accum - 1);
  stage.later_bytes_per_token = payloads * payload_bytes_per_token(dflash_, config_, device_);
  return stage;
}

void Drafting::open_link() {
  // The targets take their old link down before they build the new one: so does this end.
  receiver_.reset();
  receiver_ = std::make_unique<comm::HiddenStateReceiver>(MPI_COMM_WORLD, comm::LinkEnds{me_, topology_.targets_of(me_)},
                                                          link_config(topology_, context_.runtime.device()));
  receiver_->set_wait_check(
      [this](double waited, const std::vector<int>& silent) { session_->watchdog().check_feed(waited, silent); });
}

std::vector<comm::PackedHiddenBatch> Drafting::take_inputs() {
  std::vector<comm::PackedHiddenBatch> inputs;
  if (session_->done()) return inputs;
  auto t = session_->scope(Phase::queue_wait);
  const auto grad_accum = static_cast<std::size_t>(config_.step.grad_accum);
  const std::vector<int> targets = topology_.targets_of(me_);
  const bool round_robin = topology_.links.fan_in == FanIn::round_robin;
  for (std::size_t m = 0; m < grad_accum; ++m) {
    const std::size_t turn = static_cast<std::size_t>(session_->state().step) * grad_accum + m;
    std::optional<comm::PackedHiddenBatch> next;
    for (std::size_t k = 0; k < (round_robin ? targets.size() : 1) && !next; ++k)
      next = next_input(round_robin ? targets[(turn + k) % targets.size()] : -1);
    if (!next) break;
    inputs.push_back(std::move(*next));
  }
  return inputs;
}

std::optional<comm::PackedHiddenBatch> Drafting::next_input(int target) {
  const auto paused = std::find_if(paused_.begin(), paused_.end(),
                                   [&](const comm::PackedHiddenBatch& b) { return target < 0 || b.sender == target; });
  if (paused != paused_.end()) {
    comm::PackedHiddenBatch batch = std::move(*paused);
    paused_.erase(paused);
    return batch;
  }
  return target < 0 ? receiver_->next() : receiver_->next_from(target);
}

std::string Drafting::early_close_reason() const {
  return early_close_.empty() ? receiver_->early_close_reason() : early_close_;
}

double Drafting::ended_streams(const std::vector<StreamCursor>& cursors) const {
  const std::uint64_t end_epoch = session_->length().end_epoch();
  if (!held_out_ || end_epoch == 0) return 0;
  std::map<std::uint64_t, data::DataPosition> after;
  for (std::uint64_t s : my_streams_) after[s] = session_->state().streams[s];
  for (const StreamCursor& c : cursors) after[c.stream] = c.after;
  double ended = 0;
  for (const auto& [stream, position] : after)
    if (position.epoch >= end_epoch || data::stream_size(train_samples_, {stream, target_count(topology_)}) == 0)
      ended += 1;
  return ended;
}

Drafting::Rounds Drafting::agree_on_rounds(std::size_t mine) {
  int go[3] = {-static_cast<int>(mine), early_close_reason().empty() ? 1 : 0, stop_requested() ? 0 : 1};
  comm::all_reduce_in_place(go, 3, MPI_INT, MPI_MIN, context_.runtime.role_comm(), "MPI_Iallreduce (drafters' go)");
  if (!go[2] && session_->lead()) log_info_here(cat("stopping on request after step ", session_->state().step));
  return {go[1] && go[2] ? static_cast<std::size_t>(-go[0]) : 0, go[1] == 0};
}

void Drafting::train_micro_batch(const comm::PackedHiddenBatch& in, const StreamCursor& cursor, DraftSums& sums) {
  model::DFlashBatch batch;
  {
    auto t = session_->scope(Phase::h2d);
    batch = drafter_batch(in, dflash_, device_);
  }
  // The same batch gets the same anchors after a resume, on any drafter (stream_cursor.h).
  auto generator = at::make_generator<at::CPUGeneratorImpl>(anchor_seed(config_.step.seed, cursor));
  const model::DFlashBlocks blocks =
      model::sample_anchors(in.packed.cu_seqlens, in.packed.loss_mask, dflash_.block_size, dflash_.max_anchors, generator);
  model::DFlashStepOutput out;
  {
    auto t = session_->scope(Phase::forward);
    out = drafter_->forward(batch, blocks);
    fault_inject_delay("TOPOTRAIN_FAULT_SLOW_DRAFTER");
    if (fault_injected("TOPOTRAIN_FAULT_NONFINITE", me_, session_->step()))
      out.loss_sum = out.loss_sum * std::numeric_limits<double>::quiet_NaN();
  }
  {
    auto t = session_->scope(Phase::backward);
    out.loss_sum.backward();
  }
  sums.weight += out.weight_sum;
  sums.loss = sums.loss.defined() ? sums.loss + out.loss_sum.detach() : out.loss_sum.detach().to(torch::kFloat64);
  sums.flops += model::dflash_step_flops(dflash_, blocks, in.tokens());
  sums.slot_correct = sums.slot_correct.defined() ? sums.slot_correct + out.slot_correct : out.slot_correct;
  for (std::size_t k = 0; k < sums.slot_valid.size(); ++k) sums.slot_valid[k] += out.slot_valid[k];
  if (out.labels.defined()) sums.trivial.add(out.label_slots, out.labels);
}

std::optional<std::int64_t> Drafting::train_streams() {
  TrainingSession& session = *session_;
  TrainingState& state = session.state();
  std::optional<std::int64_t> restart;
  while (true) {
    session.begin_step();
    std::vector<comm::PackedHiddenBatch> inputs = take_inputs();
    const double waited = session.timer().step_seconds(Phase::queue_wait);
    const auto [rounds, early_close] = agree_on_rounds(inputs.size());
    if (rounds == 0) {  // trained nothing: not a step; what was taken is left to a resume
      session.discard_step();
      fates_.discard(inputs);
      // A target that ran out of memory closed early (the only reason one does).
      // The failing target's peak is not known here: an automatic budget shrinks 0.9x.
      if (early_close) restart = shrunk_budget(config_.step, token_budget_, measured_ ? &*measured_ : nullptr, 0);
      if (restart && !early_close_reason().empty())
        log_warn(cat(early_close_reason(), "; ", shrink_cause(config_.step), ": restarting every stream with "
                     "token_budget ", *restart));
      break;
    }
    DraftSums sums(dflash_);
    std::vector<StreamCursor> cursors;
    for (std::size_t m = 0; m < rounds; ++m) {
      if (m < inputs.size()) {
        cursors.push_back(decode_cursor(inputs[m].cursor));
        if (std::find(my_streams_.begin(), my_streams_.end(), cursors.back().stream) == my_streams_.end())
          throw std::runtime_error(cat("dflash_train: drafter rank ", me_, " received a batch of stream ",
                                       cursors.back().stream, ", which none of its targets reads"));
        sums.tokens += static_cast<double>(inputs[m].tokens());
      }
      session.accumulate(static_cast<int>(m), static_cast<int>(rounds), m < inputs.size(),
                         [&] { train_micro_batch(inputs[m], cursors[m], sums); });
    }
    sums.ended_streams = ended_streams(cursors);
    // The summed gradient of every drafter's loss sum over the weight of all their valid
    // slots (sum 0): the gradient of one drafter's mean over the union of the batches.
    const comm::StepAgreement all = session.agree(sums.agreed(), 0);
    if (all.out_of_memory()) {
      fates_.discard(inputs);
      restart = session.after_out_of_memory(all, token_budget_, measured_ ? &*measured_ : nullptr);
      break;
    }
    if (!session.optimizer_step(all)) {
      fates_.discard(inputs);
      break;
    }
    state.step += 1;
    state.tokens += static_cast<std::int64_t>(all.sums[1]);
    for (std::size_t m = 0; m < inputs.size(); ++m) {
      state.streams[cursors[m].stream] = cursors[m].after;  // a stream's batches arrive in order
      session.sample_log().record(inputs[m].packed);
      (session.skipped() ? fates_.skipped : fates_.trained).add(inputs[m]);
    }
    StepReport report = step_report(all, sums, waited);
    StepMetrics metrics = row_of(sums.tokens);
    metrics.queue_depth = static_cast<double>(receiver_->queue_size());
    metrics.flops = sums.flops;
    // The last step: the length reached, a stop agreed, or no stream has data left.
    const bool last = session.done() || all.stop ||
                      all.sums[kEndedStreamsSum] >= static_cast<double>(target_count(topology_));
    if (held_out_ && held_out_due(config_.cadences.eval_every, state.step, last)) {
      const HeldOutDraftQuality quality = evaluate_held_out();
      report.eval_loss = quality.loss();
      report.eval_draft = quality.draft;
      if (config_.cadences.eval_speculate > 0 && session.lead())
        if (const std::optional<infer::SpeculationReport> decoded = speculate_held_out()) {
          report.eval_decoded_tau = decoded->tau;
          report.eval_decoded_trivial_tau = decoded->trivial_tau;
        }
    }
    set_draft_quality(metrics, report);
    session.end_step(report, metrics);
  }
  // Whatever is still in flight was never trained on: ask the targets to end their
  // streams and discard it (the streams' positions make a restart or a resume recompute it).
  receiver_->request_stop();
  while (auto in = receiver_->next()) fates_.discarded.add(*in);
  for (const auto& in : paused_) fates_.discarded.add(in);
  paused_.clear();
  return restart;
}

HeldOutDraftQuality Drafting::evaluate_held_out() {
  const auto started = std::chrono::steady_clock::now();
  auto t = session_->scope(Phase::eval);
  // Pause: every target ends its stream; what it had sent waits in paused_ for the steps
  // that follow, which take it first, each target's in its order.
  receiver_->request_stop();
  while (auto in = receiver_->next()) paused_.push_back(std::move(*in));
  if (early_close_.empty()) early_close_ = receiver_->early_close_reason();
  // The held-out pass over a link of its own: it ends when every target has closed.
  send_held_out_starts(topology_, me_, token_budget_);
  open_link();
  HeldOutDraftSums sums(dflash_.block_size, dflash_.target.vocab_size);
  std::map<int, std::uint64_t> received;  // per target: its held-out batches so far
  while (auto in = receiver_->next()) {
    const std::uint64_t stream = stream_of(topology_, in->sender).index;
    auto generator =
        at::make_generator<at::CPUGeneratorImpl>(held_out_anchor_seed(config_.step.seed, stream, received[in->sender]++));
    const model::DFlashBlocks blocks = model::sample_anchors(in->packed.cu_seqlens, in->packed.loss_mask,
                                                             dflash_.block_size, dflash_.max_anchors, generator);
    sums.add(*drafter_, drafter_batch(*in, dflash_, device_), blocks);
  }
  if (early_close_.empty()) early_close_ = receiver_->early_close_reason();
  // Resume: each stream after the last batch received from it, trained or paused.
  std::vector<data::DataPosition> positions = session_->state().streams;
  for (const auto& in : paused_) {
    const StreamCursor cursor = decode_cursor(in.cursor);
    positions.at(cursor.stream) = cursor.after;
  }
  send_stream_starts(topology_, me_, positions, token_budget_);
  open_link();
  const HeldOutDraftQuality quality = sums.agree(context_.runtime.role_comm());
  if (session_->lead()) {
    log_info_here(cat("held-out draft quality after step ", session_->state().step, ": ",
                      quality.draft.summary(/*all_slots=*/true), " | loss ", fixed_point(quality.loss(), 4),
                      " over ", quality.anchors, " anchors (", quality.tokens, " tokens) of ", held_out_documents_,
                      " documents, in ",
                      fixed_point(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 2),
                      " s"));
  }
  return quality;
}

std::optional<infer::SpeculationReport> Drafting::speculate_held_out() {
  const auto started = std::chrono::steady_clock::now();
  auto t = session_->scope(Phase::eval);
  const std::string source =
      config_.data.eval_path.empty() ? cat(config_.data.path, "'s held-out documents") : config_.data.eval_path;
  const infer::PromptSet prompts = infer::dataset_prompts(*held_out_set_, config_.cadences.eval_speculate, source);
  if (prompts.prompts.empty()) {
    log_warn(cat("train.eval_speculate: ", source, " holds no assistant turn (a run of loss_mask 1 after a "
                 "document's first token) to decode after; nothing decoded"));
    return std::nullopt;
  }
  infer::SpeculationOptions options;
  options.target = "target";
  options.drafter = "drafter";
  options.prompts = source;
  options.max_new_tokens = kEvalSpeculateTokens;
  const infer::SpeculationReport r =
      infer::run_speculation(*target_, *drafter_, prompts, options, {device_, drafter_->compute_dtype()});
  log_info_here(cat("held-out speculative decoding after step ", session_->state().step, " (", r.prompts,
                    " prompts, up to ", kEvalSpeculateTokens, " tokens each): tau ", fixed_point(r.tau, 2),
                    " (trivial drafter ", fixed_point(r.trivial_tau, 2), "), ",
                    fixed_point(r.speculative_forwards_per_token(), 3), " target forwards per token (trivial ",
                    fixed_point(r.trivial_forwards_per_token, 3), "), ",
                    r.mismatched_prompts == 0 ? std::string("lossless")
                                              : cat(r.mismatched_prompts, " responses differ from greedy decoding"),
                    ", in ",
                    fixed_point(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 2),
                    " s"));
  return r;
}

Outcome Drafting::run() {
  TrainingSession& session = *session_;
  TrainingState& state = session.state();
  // A restart starts every stream again where the last completed step left it.
  while (const std::optional<std::int64_t> restart = train_streams()) {
    token_budget_ = *restart;
    fates_.restart();
    early_close_.clear();  // the restart answers it
    send_stream_starts(topology_, me_, state.streams, token_budget_);
    open_link();
  }
  send_stream_end(topology_, me_);
  session.finish();
  // Every batch the targets sent, over all drafters: trained, skipped (not finite),
  // recomputed after a restart, or discarded (in flight when the drafters stopped early; a
  // resume trains it).
  const DataAmount* fates[4] = {&fates_.trained, &fates_.skipped, &fates_.recomputed, &fates_.discarded};
  std::int64_t amounts[8];
  for (int i = 0; i < 4; ++i) {
    amounts[2 * i] = fates[i]->samples;
    amounts[2 * i + 1] = fates[i]->tokens;
  }
  comm::all_reduce_in_place(amounts, 8, MPI_INT64_T, MPI_SUM, context_.runtime.role_comm(),
                            "MPI_Iallreduce (end of data)");
  auto amount = [&](int i) { return DataAmount{amounts[2 * i], amounts[2 * i + 1]}.str(); };
  if (session.lead())
    log_info_here(cat("drafter done: ", state.step, " steps, ", state.tokens, " tokens; trained ", amount(0),
                      ", skipped as not finite ", amount(1), " in ", session.skipped_steps(), " steps, ",
                      amounts[4] > 0 || amounts[5] > 0 ? cat("recomputed after a restart ", amount(2), ", ")
                                                        : std::string(),
                      "discarded ", amount(3), "; checkpoints and timings.h5 in ", config_.run_dir));
  return session.failure();
}

}  // namespace

Runtime::Outcome run_dflash_drafting(JobContext& context, model::Qwen3CausalLM& target,
                                     const model::DFlashConfig& config, const torch::Device& device) {
  return Drafting(context, target, config, device).run();
}

}  // namespace topotrain
