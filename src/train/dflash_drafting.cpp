#include "topotrain/train/dflash_drafting.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>

#include "drafting.h"
#include "topotrain/core/fault_injection.h"
#include "topotrain/core/log.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/model/dflash_anchors.h"
#include "topotrain/train/dflash_pipeline.h"
#include "topotrain/train/held_out_eval.h"
#include "topotrain/train/out_of_memory.h"
#include "topotrain/train/run_setup.h"

namespace topotrain {
namespace drafting {

model::DFlashBatch drafter_batch(const comm::PackedHiddenBatch& in, const model::DFlashConfig& config,
                                 const torch::Device& device) {
  const std::int64_t tap_columns = static_cast<std::int64_t>(config.resolved_taps().size()) * config.target.hidden_size;
  model::DFlashBatch batch;
  batch.packed = in.packed.to(device);
  batch.taps = in.hidden.narrow(1, 0, tap_columns);
  if (config.loss == model::DFlashLoss::kl) batch.final_hidden = in.hidden.narrow(1, tap_columns, config.target.hidden_size);
  return batch;
}

namespace {

// The drafters' step as the progress line shows it: the agreed sums (draft quality
// included), this drafter's wait for batches.
StepReport step_report(const AgreedDraftSums& all, double waited) {
  StepReport report;
  report.tokens = static_cast<std::int64_t>(all.tokens);
  report.loss = all.loss / std::max(all.weight, 1e-12);
  report.loss_weight = all.weight;
  report.flops = all.flops;
  report.starved_seconds = waited;
  report.draft = all.draft;
  return report;
}

}  // namespace

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
    out.loss_sum = session_->fault_inject_nonfinite(out.loss_sum);
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
    const comm::StepAgreement all = session.optimizer_step(sums.step_sums());
    if (all.out_of_memory()) {
      fates_.discard(inputs);
      restart = session.after_out_of_memory(all, token_budget_, measured_ ? &*measured_ : nullptr);
      break;
    }
    if (session.failed()) {
      fates_.discard(inputs);
      break;
    }
    const AgreedDraftSums agreed(all.sums, sums.slot_valid.size());
    state.step += 1;
    state.tokens += static_cast<std::int64_t>(agreed.tokens);
    for (std::size_t m = 0; m < inputs.size(); ++m) {
      state.streams[cursors[m].stream] = cursors[m].after;  // a stream's batches arrive in order
      session.sample_log().record(inputs[m].packed);
      (session.skipped() ? fates_.skipped : fates_.trained).add(inputs[m]);
    }
    StepReport report = step_report(agreed, waited);
    StepMetrics metrics = row_of(sums.tokens);
    metrics.queue_depth = static_cast<double>(receiver_->queue_size());
    metrics.flops = sums.flops;
    // The last step: the length reached, a stop agreed, or no stream has data left.
    const bool last =
        session.done() || all.stop || agreed.ended_streams >= static_cast<double>(target_count(topology_));
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
    // A checkpoint of this step, if end_step saves one, holds every stream's position: the
    // drafters gather them every step (a collective over the drafters).
    session.set_checkpoint_streams(gather_stream_positions(state.streams, my_streams_, context_.runtime.role_comm()));
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

}  // namespace drafting

Runtime::Outcome run_dflash_drafting(JobContext& context, model::CausalLM& target,
                                     const model::DFlashConfig& config, const torch::Device& device) {
  return drafting::Drafting(context, target, config, device).run();
}

}  // namespace topotrain
