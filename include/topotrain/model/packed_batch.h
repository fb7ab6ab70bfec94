// A packed micro-batch: the tokens of several documents in one row, no padding.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace topotrain::model {

struct PackedBatch {
  torch::Tensor tokens;      // int64 [T]
  torch::Tensor positions;   // int64 [T], restarting at 0 in every document
  torch::Tensor cu_seqlens;  // int32 [docs + 1], cu_seqlens[0] = 0, cu_seqlens[docs] = T
  // Longest document. Kept on the host because the varlen kernels need it as a number
  // and reading it back from a GPU tensor would stall the stream.
  int64_t max_seqlen = 0;
  // Every document's length, also on the host for the same reason (attention lays the
  // documents out by them). May be empty when the batch's maker did not have them: attention
  // then takes a kernel that needs only cu_seqlens.
  std::vector<int64_t> document_lengths;
  // uint8 [T]: 1 where a token is trained on as a next-token target (chat data: the
  // assistant's tokens). Undefined: every target is.
  torch::Tensor loss_mask;

  int64_t num_tokens() const { return tokens.size(0); }
  int64_t num_documents() const { return cu_seqlens.size(0) - 1; }

  // Builds a CPU batch; every document must be non-empty.
  static PackedBatch from_documents(const std::vector<std::vector<int64_t>>& documents);
  PackedBatch to(const torch::Device& device) const;
  // Checks dtypes, shapes and (on CPU tensors) the cu_seqlens invariants; throws
  // std::invalid_argument saying what is wrong.
  void check() const;
};

// Rows of a packed batch that have a next-token target the loss trains on (every token
// but the last of its document, whose next token has loss mask 1) and those targets.
struct NextTokenTargets {
  torch::Tensor rows;     // int64 [N]
  torch::Tensor targets;  // int64 [N]
};
NextTokenTargets next_token_targets(const PackedBatch& batch);

}  // namespace topotrain::model
