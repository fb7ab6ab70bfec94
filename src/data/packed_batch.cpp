#include "topotrain/data/packed_batch.h"

namespace topotrain::data {

PackedBatch first_sequences(const PackedBatch& batch, int64_t sequences) {
  if (sequences >= batch.num_sequences()) return batch;
  const torch::Tensor cu = batch.cu_seqlens.narrow(0, 0, sequences + 1);
  const int64_t tokens = cu[sequences].item<int64_t>();
  PackedBatch out;
  out.tokens = batch.tokens.narrow(0, 0, tokens);
  out.positions = batch.positions.narrow(0, 0, tokens);
  out.loss_mask = batch.loss_mask.narrow(0, 0, tokens);
  out.cu_seqlens = cu;
  out.sample_ids = batch.sample_ids.narrow(0, 0, sequences);
  out.num_tokens = tokens;
  const torch::Tensor firsts = out.loss_mask.index_select(0, cu.narrow(0, 0, sequences).to(torch::kInt64));
  out.num_loss_targets = (out.loss_mask.sum() - firsts.sum()).item<int64_t>();
  out.max_seqlen = sequences > 0 ? (cu.slice(0, 1) - cu.slice(0, 0, -1)).max().item<int64_t>() : 0;
  if (!batch.sequence_lengths.empty()) {
    out.sequence_lengths.assign(batch.sequence_lengths.begin(), batch.sequence_lengths.begin() + sequences);
  }
  return out;
}

}  // namespace topotrain::data
