#include "topotrain/train/dflash_held_out.h"

#include "topotrain/comm/watchdog.h"

namespace topotrain {

double HeldOutDraftQuality::loss() const { return weight > 0 ? loss_sum / weight : 0.0; }

HeldOutDraftSums::HeldOutDraftSums(std::int64_t block_size, std::int64_t vocab_size)
    : valid_(static_cast<std::size_t>(block_size), 0), trivial_(block_size, vocab_size) {}

void HeldOutDraftSums::add(model::DFlashDrafterImpl& drafter, const model::DFlashBatch& batch,
                           const model::DFlashBlocks& blocks) {
  torch::NoGradGuard no_grad;
  const model::DFlashStepOutput out = drafter.forward(batch, blocks);
  const torch::Tensor loss = out.loss_sum.to(torch::kFloat64);
  loss_ = loss_.defined() ? loss_ + loss : loss;
  correct_ = correct_.defined() ? correct_ + out.slot_correct : out.slot_correct;
  for (std::size_t k = 0; k < valid_.size(); ++k) valid_[k] += out.slot_valid[k];
  if (out.labels.defined()) trivial_.add(out.label_slots, out.labels);
  weight_ += out.weight_sum;
  batches_ += 1;
  anchors_ += out.num_blocks;
  tokens_ += batch.taps.size(0);
}

HeldOutDraftQuality HeldOutDraftSums::agree(MPI_Comm drafters) const {
  const std::size_t slots = valid_.size();
  // [loss, weight, correct drafts per slot, the trivial drafters' per slot]; the device's
  // part read in one copy.
  std::vector<double> sums(2 + 3 * slots, 0.0);
  sums[1] = weight_;
  if (loss_.defined()) {
    const torch::Tensor host =
        torch::cat({loss_.reshape({1}), correct_.to(torch::kFloat64), trivial_.correct().to(loss_.device(), torch::kFloat64)})
            .cpu();
    const double* values = host.data_ptr<double>();
    sums[0] = values[0];
    for (std::size_t k = 0; k < 3 * slots; ++k) sums[2 + k] = values[1 + k];
  }
  std::vector<std::int64_t> counts = valid_;
  counts.insert(counts.end(), {batches_, anchors_, tokens_});
  comm::all_reduce_in_place(sums.data(), static_cast<int>(sums.size()), MPI_DOUBLE, MPI_SUM, drafters,
                            "MPI_Iallreduce (held-out draft sums)");
  comm::all_reduce_in_place(counts.data(), static_cast<int>(counts.size()), MPI_INT64_T, MPI_SUM, drafters,
                            "MPI_Iallreduce (held-out draft counts)");
  HeldOutDraftQuality quality;
  quality.loss_sum = sums[0];
  quality.weight = sums[1];
  auto slot_sums = [&](std::size_t run) {  // the run-th [B] run of sums after loss and weight
    std::vector<std::int64_t> out;
    for (std::size_t k = 0; k < slots; ++k) out.push_back(static_cast<std::int64_t>(sums[2 + run * slots + k]));
    return out;
  };
  quality.draft = DraftQuality{slot_sums(0), {counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(slots)},
                               slot_sums(1), slot_sums(2)};
  quality.batches = counts[slots];
  quality.anchors = counts[slots + 1];
  quality.tokens = counts[slots + 2];
  return quality;
}

}  // namespace topotrain
