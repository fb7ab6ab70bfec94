// The drafter side of dflash_train (run_dflash_drafting, dflash_drafting.h): one Drafting
// per drafter rank, its sources split by what they do:
//   drafting_setup.cpp     the constructor (models, data, budget, session, the first link)
//   dflash_drafting.cpp    the step loop and the run
//   drafting_held_out.cpp  held-out evaluation and speculative decoding after a step
// Internal to src/train.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "topotrain/comm/hidden_state_link.h"
#include "topotrain/core/error.h"
#include "topotrain/infer/speculation_run.h"
#include "topotrain/model/dflash_drafter.h"
#include "topotrain/model/dflash_metrics.h"
#include "topotrain/train/dflash_held_out.h"
#include "topotrain/train/draft_quality.h"
#include "topotrain/train/job.h"
#include "topotrain/train/stream_cursor.h"
#include "topotrain/train/training_session.h"

namespace topotrain::drafting {

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

// A step's sums on this drafter, as the agreement adds them (AgreedDraftSums reads them
// back): valid-slot weight (also what the gradients are divided by: the summed gradient of
// every drafter's loss sum over the weight of all their valid slots is the gradient of one
// drafter's mean over the union of the batches), tokens, loss sum, model FLOPs (which vary
// with the anchors drawn), this drafter's streams whose data has ended after the step
// (counted with held-out documents only: their sum tells the run's last step), then the
// draft quality (DraftQuality's four [B] counts; the trivial drafters' are
// model::TrivialDrafterCounts). Draft quality is thus every drafter's, read with the loss in
// the agreement's one wait for the device.
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

  StepSums step_sums() const {
    const std::int64_t slots = static_cast<std::int64_t>(slot_valid.size());
    auto host = [](double v) { return torch::tensor(v, torch::kFloat64); };
    return {weight,
            {host(weight), host(tokens), loss, host(flops), host(ended_streams),
             slot_correct.defined() ? slot_correct : torch::zeros({slots}, torch::kInt64),
             torch::tensor(slot_valid, torch::kInt64), trivial.correct()}};
  }
};

// DraftSums summed over the drafters, by name.
struct AgreedDraftSums {
  AgreedDraftSums(const std::vector<double>& sums, std::size_t slots) {
    auto next = sums.begin();
    for (double* field : {&weight, &tokens, &loss, &flops, &ended_streams}) *field = *next++;
    for (auto* counts : {&draft.correct, &draft.valid, &draft.mode_correct, &draft.slot_mode_correct})
      for (std::size_t k = 0; k < slots; ++k) counts->push_back(static_cast<std::int64_t>(*next++));
  }
  double weight = 0, tokens = 0, loss = 0, flops = 0, ended_streams = 0;
  DraftQuality draft;
};

// The batch a drafter trains on: `in`'s packed batch on `device`, its taps (and final hidden
// states, with the kl loss) as views of the payload.
model::DFlashBatch drafter_batch(const comm::PackedHiddenBatch& in, const model::DFlashConfig& config,
                                 const torch::Device& device);

class Drafting {
 public:
  Drafting(JobContext& context, model::CausalLM& target, const model::DFlashConfig& dflash,
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
  // evaluate_held_out's work: pause the streams, draft the held-out share, resume.
  HeldOutDraftQuality held_out_pass();
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
  model::CausalLM target_;  // the whole target, for train.eval_speculate
  std::deque<comm::PackedHiddenBatch> paused_;  // received before a held-out pass, not yet taken
  std::string early_close_;                     // seen by a link a held-out pass replaced
};

}  // namespace topotrain::drafting
