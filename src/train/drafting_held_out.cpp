// Drafting's held-out evaluation and speculative decoding after a step (drafting.h).
#include <ATen/CPUGeneratorImpl.h>

#include <map>

#include "drafting.h"
#include "topotrain/core/log.h"
#include "topotrain/model/dflash_anchors.h"
#include "topotrain/train/dflash_pipeline.h"

namespace topotrain::drafting {
namespace {

// train.eval_speculate's responses: long enough for several blocks of 16, short enough that a
// held-out pass of a few prompts stays a pause.
constexpr std::int64_t kEvalSpeculateTokens = 128;

}  // namespace

HeldOutDraftQuality Drafting::evaluate_held_out() {
  return session_->evaluate_held_out(
      "draft quality", [this] { return held_out_pass(); },
      [this](const HeldOutDraftQuality& quality) {
        return cat(": ", quality.draft.summary(/*all_slots=*/true), " | loss ", fixed_point(quality.loss(), 4),
                   " over ", quality.anchors, " anchors (", quality.tokens, " tokens) of ", held_out_documents_,
                   " documents");
      });
}

HeldOutDraftQuality Drafting::held_out_pass() {
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
  return sums.agree(context_.runtime.role_comm());
}

std::optional<infer::SpeculationReport> Drafting::speculate_held_out() {
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
  return session_->evaluate_held_out(
      "speculative decoding",
      [&] { return infer::run_speculation(*target_, *drafter_, prompts, options, {device_, drafter_->compute_dtype()}); },
      [](const infer::SpeculationReport& r) {
        return cat(" (", r.prompts, " prompts, up to ", kEvalSpeculateTokens, " tokens each): tau ",
                   fixed_point(r.tau, 2), " (trivial drafter ", fixed_point(r.trivial_tau, 2), "), ",
                   fixed_point(r.speculative_forwards_per_token(), 3), " target forwards per token (trivial ",
                   fixed_point(r.trivial_forwards_per_token, 3), "), ",
                   r.mismatched_prompts == 0 ? std::string("lossless")
                                             : cat(r.mismatched_prompts, " responses differ from greedy decoding"));
      });
}

}  // namespace topotrain::drafting
