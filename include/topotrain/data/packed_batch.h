// One micro-batch of packed samples: no padding, sequence boundaries in cu_seqlens.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace topotrain::data {

struct PackedBatch {
  torch::Tensor tokens;      // int64 [T]
  torch::Tensor positions;   // int64 [T], 0 at a sample's first token; a split sample continues
  torch::Tensor cu_seqlens;  // int32 [n + 1], cu_seqlens[0] == 0, cu_seqlens[n] == T
  torch::Tensor loss_mask;   // uint8 [T], all ones when the dataset has no loss mask
  torch::Tensor sample_ids;  // int64 [n], dataset index of each packed piece
  int64_t num_tokens = 0;       // T
  // Tokens with loss mask 1 that are not their piece's first token: the next-token
  // targets the LM loss trains on.
  int64_t num_loss_targets = 0;
  // Longest piece: varlen attention kernels take it as a host number, and reading it from
  // cu_seqlens on the GPU would stall the stream.
  int64_t max_seqlen = 0;
  // Every piece's length, on the host for the same reason (attention plans its layout by them).
  std::vector<int64_t> sequence_lengths;

  int64_t num_sequences() const { return sample_ids.numel(); }
};

}  // namespace topotrain::data
